"""The package's source, as the built site shows it in a real browser (see test_browser)."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from test_browser import PROSE_ONLY, _open, browser, site, toc_pages  # noqa: F401 (fixtures)

# The glossary and the teacher's guide show no package source.
NO_SOURCE = PROSE_ONLY | {"book/teaching.html"}


def test_shown_source_has_its_file_name_and_fits_the_page(site, browser):  # noqa: F811
    """show_source cells: the input is removed, the code is shown under its file and
    lines, and long lines wrap inside the box instead of widening the page."""
    for path in toc_pages():
        if path in NO_SOURCE:
            continue
        page, _, _ = _open(browser, urljoin(site, path))
        boxes = page.locator("article .learn-parallel-source")
        assert boxes.count() >= 1, f"{path}: no source shown"
        for i in range(boxes.count()):
            title = boxes.nth(i).locator("div").first.inner_text()
            assert re.fullmatch(r"learn_parallel/[\w/]+\.py, lines \d+-\d+", title), title
            overflow = boxes.nth(i).locator("pre").evaluate("e => e.scrollWidth - e.clientWidth")
            assert overflow <= 1, f"{path}: {title} is {overflow} px too wide"
        assert "show_source(" not in page.locator("article").inner_text(), path
        page.close()
