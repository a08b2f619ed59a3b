"""The built site works in a real browser: pages, links, images, search, solutions.

Builds the site from the chapters' stored outputs (``_book.built_site``), serves it on
localhost and drives Debian's headless Chromium with Playwright
(``executable_path=/usr/bin/chromium``; no ``playwright install`` needed). Skipped, with the
reason, where Chromium, Playwright or jupyter-book is not installed.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import tempfile
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
import yaml
from _book import ROOT, built_site, jupyter_book

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not Path(CHROMIUM).exists():
    pytest.skip(
        "Chromium is not installed (apt-get install -y chromium chromium-driver)",
        allow_module_level=True,
    )


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part["chapters"]]
    return [f"{page}.html" for page in pages]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if jupyter_book() is None:
        pytest.skip("jupyter-book is not installed (pip install -r requirements.txt)")
    html = built_site(tmp_path_factory)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(html))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    with tempfile.TemporaryDirectory() as profile, playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=FLAGS
        )
        yield context
        context.close()


# Jupyter Book 1.x's theme loads sphinx-thebe's small config script twice on every page;
# the second copy fails to redeclare a constant. Harmless (thebe is not used here), so
# it is the one script error tolerated.
KNOWN_THEME_ERRORS = ("Identifier 'THEBE_JS_URL' has already been declared",)


def _open(browser, url):
    page = browser.new_page()
    errors = []
    page.on(
        "pageerror",
        lambda error: None if str(error) in KNOWN_THEME_ERRORS else errors.append(str(error)),
    )
    response = page.goto(url, wait_until="load")
    return page, response, errors


def test_every_toc_page_loads_with_title_and_no_script_errors(site, browser):
    for path in toc_pages():
        page, response, errors = _open(browser, urljoin(site, path))
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        assert page.locator("article h1").count() >= 1, f"{path}: no chapter title"
        assert not errors, f"{path}: JavaScript errors {errors}"
        page.close()


def test_internal_links_and_images_resolve(site, browser):
    checked: set[str] = set()
    for path in toc_pages():
        page, _, _ = _open(browser, urljoin(site, path))
        hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        srcs = page.eval_on_selector_all("img[src]", "els => els.map(e => e.src)")
        broken = page.eval_on_selector_all(
            "article img", "els => els.filter(e => !(e.complete && e.naturalWidth > 0)).length"
        )
        assert broken == 0, f"{path}: {broken} images failed to render"
        for url in [*hrefs, *srcs]:
            target = url.split("#")[0]
            if urlparse(target).netloc != urlparse(site).netloc or target in checked:
                continue
            checked.add(target)
            response = page.request.get(target)
            assert response.ok, f"{path} links to {target}: HTTP {response.status}"
        page.close()
    assert len(checked) > 10


PROSE_ONLY = {"book/glossary.html"}  # the glossary explains terms: nothing to plot or show


def test_every_chapter_has_a_rendered_figure(site, browser):
    for path in toc_pages():
        if path in PROSE_ONLY:
            continue
        page, _, _ = _open(browser, urljoin(site, path))
        sizes = page.eval_on_selector_all(
            "article .cell_output img", "els => els.map(e => [e.naturalWidth, e.naturalHeight])"
        )
        assert any(w > 100 and h > 100 for w, h in sizes), f"{path}: no rendered plot"
        page.close()


def test_search_finds_a_chapter(site, browser):
    page, _, _ = _open(browser, urljoin(site, "search.html?q=replicate"))
    results = page.locator("#search-results li a")
    results.first.wait_for(timeout=15000)
    links = results.evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert any("replicate" in link for link in links), links
    page.close()


def test_solution_is_hidden_until_opened(site, browser):
    """A solution is a collapsed <details> block labelled "Solution": its code shows on a click."""
    page, _, _ = _open(browser, urljoin(site, "book/scatter.html"))
    solution = page.locator("details", has=page.locator("summary", has_text="Solution")).first
    solution.wait_for(state="attached")
    code = solution.locator("pre").first
    assert not code.is_visible(), "the solution is visible before it is opened"
    solution.locator("summary").first.click()
    code.wait_for(state="visible", timeout=5000)
    assert "def chunk_sizes" in code.inner_text()
    page.close()


def test_colab_launch_button_points_at_the_notebook(site, browser):
    page, _, _ = _open(browser, urljoin(site, "book/gather.html"))
    colab = page.locator("a[href*='colab.research.google.com']").first
    assert colab.count() == 1
    assert colab.get_attribute("href").endswith("book/gather.ipynb")
    page.close()


def test_formulas_render_with_no_network_beyond_this_machine(site, browser):
    """MathJax comes with the site (sphinx-mathjax-offline): with every request that leaves
    this machine refused, each formula of the distributed chapter is typeset."""
    page, refused = browser.new_page(), []

    def local_only(route):
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", local_only)
    page.goto(urljoin(site, "book/distributed.html"), wait_until="load")
    formulas = page.locator("article .math").count()
    assert formulas >= 5
    page.wait_for_function(
        f"document.querySelectorAll('article mjx-container').length >= {formulas}",
        timeout=60_000,
    )
    assert page.locator("article mjx-container").count() == formulas
    assert not [url for url in refused if "mathjax" in url.lower()], refused
    page.close()
