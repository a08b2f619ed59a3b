"""Every chapter works as a plain notebook, not only in the built site.

* ``test_plain_nbconvert_*``: each notebook converted to HTML by nbconvert alone (no
  Sphinx) has no raw MyST directive markup in its Markdown, and each ``show_source``
  cell's stored output holds the current source of what it names, under that file's name
  and lines.
* ``test_plain_nbconvert_links_*``: every relative link or image in the HTML names a file
  that exists (links between chapters name the ``.ipynb``).
* ``test_stored_outputs_name_no_path_*``: no stored output names an absolute path of the
  machine that executed the book (tracebacks included).
* ``test_the_wheel_runs_a_chapter_offline``: a wheel of the package, installed into a
  fresh virtual environment outside the repository, executes a chapter with every network
  connection refused, recorded H200 plots included (they ship in the wheel).
* ``test_the_wheel_runs_the_teachers_guide_*``: from that wheel the teacher's guide runs
  (handouts, grading, the track, from the chapters the wheel carries), and ``track OUT``
  writes the task tests.
* ``test_missing_recordings_*``: without the recorded runs (a broken install) a chapter's
  setup cell fails with one error that says how to fix it.
* ``test_launch_links_*``: every Colab/launch link of the built site names a notebook that
  exists in the repository; the repository URL is written the same way everywhere.
"""

from __future__ import annotations

import ast
import functools
import html
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

# These tests read and convert notebooks: a machine without Jupyter (say, a GPU box
# running ``pytest -m gpu``) skips this file instead of failing to collect it.
nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")
yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")

from _book import BOOK, ROOT, built_site, jupyter_book  # noqa: E402

from learn_parallel.lab.source import source_of  # noqa: E402

NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY = CONFIG["repository"]["url"]
RAW_MARKUP = ["```{", ":::{", "{literalinclude}", "{exercise", "{solution"]
MISSING = "No recorded runs in"


def _simulated_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)
    env["LEARN_PARALLEL_SIMULATE"] = "1"
    env.update(extra)
    return env


# Pages that show no package source and need no setup cell: the glossary (prose only) and
# the teacher's guide (it drives the classroom tools on the repository's own book/).
NO_SOURCE = {"glossary", "teaching"}


def _show_source_calls(cell, earlier: list[str] = ()) -> list[tuple]:
    """The arguments of the ``show_source(...)`` calls in a code cell.

    An argument is a literal, or an object named through ``lp`` or through the imports of
    the chapter's earlier code cells or of the cell itself (``show_source(train.x)``).
    """
    import learn_parallel

    tree = ast.parse(cell.source)
    names: dict = {"lp": learn_parallel, "learn_parallel": learn_parallel}
    imports = [
        n
        for body in [*(_top_level(source) for source in earlier), tree.body]
        for n in body
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    exec(compile(ast.Module(imports, type_ignores=[]), "<cell imports>", "exec"), names)
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "show_source":
            calls.append(
                tuple(
                    eval(compile(ast.Expression(a), "<show_source argument>", "eval"), names)
                    for a in node.args
                )
            )
    return calls


def _top_level(source: str) -> list[ast.stmt]:
    """A cell's statements, or none where it is not plain Python (``!pip``, ``%time``)."""
    try:
        return ast.parse(source).body
    except SyntaxError:
        return []


# -- plain nbconvert ------------------------------------------------------------------


@functools.cache
def _plain_html(path: Path):
    """A notebook as plain nbconvert renders it (stored outputs, no Sphinx), parsed."""
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    return nb, BeautifulSoup(HTMLExporter().from_notebook_node(nb)[0], "html.parser")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plain_nbconvert_renders_no_directive_markup(path):
    nb, page = _plain_html(path)
    # The HTML, not only its text: a ```{exercise-start} fence renders as a code block whose
    # class attribute still carries the directive's name.
    markdown = [str(cell) for cell in page.select(".jp-MarkdownCell")]
    assert len(markdown) == sum(c.cell_type == "markdown" for c in nb.cells)
    raw = [m for text in markdown for m in RAW_MARKUP if m in text]
    assert not raw, f"{path.name}: Sphinx-only markup shows as text in Jupyter: {sorted(set(raw))}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plain_nbconvert_shows_the_real_source(path):
    nb, page = _plain_html(path)
    code_cells = page.select(".jp-CodeCell")
    shown = 0
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, (cell, rendered) in enumerate(zip(code, code_cells)):
        for args in _show_source_calls(cell, [c.source for c in code[:i]]):
            source = source_of(*args)
            text = html.unescape(rendered.select_one(".jp-OutputArea").get_text())
            assert source.title in text, f"{path.name}: {args} does not show {source.title}"
            assert source.text.strip() in text, f"{path.name}: {args} shows stale source"
            shown += 1
    assert shown >= 1 or path.stem in NO_SOURCE, f"{path.name} shows none of the package's source"


# A path that starts at the file system's root (not a URL's path, not a relative path, not
# the interpreter a printed script's "#!" line names for the machine that will run it).
ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~!-])/(?:[\w.@+~-]+/)+[\w.@+~-]+")
# Paths that are the same wherever the book is built: the kernel's files, and the folders a
# graded job sees inside the bubblewrap sandbox (HOME is /tmp/home there, on every machine).
SAME_ON_EVERY_MACHINE = ("/proc/", "/tmp/home", "/dev/shm")  # inside the sandbox
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _output_texts(output) -> list[str]:
    texts = [output.get("text", ""), output.get("evalue", ""), *output.get("traceback", [])]
    texts += [v for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return [ANSI.sub("", t if isinstance(t, str) else "".join(t)) for t in texts]


SITE = CONFIG["html"]["baseurl"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_links_between_chapters_work_where_a_chapter_is_opened_alone(path):
    """A link to another chapter names its page in the hosted book (``html.baseurl``), which
    works in Colab and in a copied notebook as well as in the site (where
    ``book/_ext/site_links.py`` makes it relative); a relative link names a file that exists."""
    _, page = _plain_html(path)
    broken, relative_chapters = [], []
    for tag, attribute in (("a", "href"), ("img", "src")):
        for element in page.find_all(tag):
            target = element.get(attribute) or ""
            if target.startswith(SITE):
                name = target[len(SITE) :].split("#")[0]
                if not (name.startswith("book/") and (ROOT / name).with_suffix(".ipynb").exists()):
                    broken.append(target)
                continue
            if not target or re.match(r"[a-z][\w+.-]*:|#", target):  # a URL, data:, an anchor
                continue
            if target.split("#")[0].endswith(".ipynb"):
                relative_chapters.append(target)
            elif not (path.parent / target.split("#")[0].split("?")[0]).exists():
                broken.append(target)
    assert not broken, f"{path.name} links to pages or files that do not exist: {broken}"
    assert not relative_chapters, (
        f"{path.name}: relative links to chapters break where it is opened alone; link "
        f"{SITE}book/<chapter>.html instead: {relative_chapters}"
    )


def test_the_site_keeps_links_to_its_chapters_inside_itself(site):
    # <a> links only: each page's canonical <link> names its hosted address, as it should.
    link = re.compile(rf'<a [^>]*href="({re.escape(SITE)}book/[^"]+)"')
    leaking = {
        page.name: sorted(set(link.findall(page.read_text())))
        for page in sorted((site / "book").glob("*.html"))
    }
    assert not {k: v for k, v in leaking.items() if v}, leaking


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_plain_nbconvert_shows_no_solution_code_without_a_click(path):
    """In plain nbconvert HTML every solution sits in a closed ``<details>`` labelled
    *Solution*: its code is on the page only inside that fold."""
    from learn_parallel.classroom.notebooks import exercises

    nb, page = _plain_html(path)
    folds = [d for d in page.find_all("details") if d.summary and "Solution" in d.summary.text]
    assert all(not d.has_attr("open") for d in folds), f"{path.name}: a solution is unfolded"
    solutions = [s for ex in exercises(nb) for s in ex.solutions]
    assert len(folds) == len(solutions), f"{path.name}: {len(folds)} folds, {len(solutions)}"

    def flat(text: str) -> str:
        return " ".join(text.split())

    folded = flat(" ".join(d.get_text() for d in folds))
    for fold in page.find_all("details"):
        fold.decompose()
    visible = flat(page.get_text())  # the page without its folds
    for solution in solutions:
        code = flat(solution.split("\ncheck(")[0])  # the answer, without its check call
        assert code in folded, f"{path.name}: a solution is not inside its fold"
        assert code not in visible, f"{path.name}: solution code visible outside its fold"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_name_no_path_of_the_build_machine(path):
    """Tracebacks and printed paths say ``learn_parallel/replicate.py`` or ``torch/...``,
    not where the book was executed (``book/_ext/short_tracebacks.py``)."""
    nb, _ = _plain_html(path)
    found = {
        match
        for cell in nb.cells
        for output in cell.get("outputs", [])
        for text in _output_texts(output)
        for match in ABSOLUTE_PATH.findall(text)
        if not match.startswith(SAME_ON_EVERY_MACHINE)
    }
    examples = sorted(found)[:3]
    assert not found, f"{path.name}: stored outputs name {len(found)} paths, e.g. {examples}"


def test_show_source_wraps_long_lines_and_names_the_file():
    source = source_of("learn_parallel.replicate", "broadcast")
    assert source.path == "learn_parallel/replicate.py"
    lines = (ROOT / source.path).read_text().splitlines()
    assert lines[source.first_line - 2].strip() == "# [broadcast]"
    assert "white-space:pre-wrap" in source._repr_html_()
    assert source.title in source._repr_markdown_() and source.title in repr(source)
    method = source_of("learn_parallel.data_parallel.DataParallel.scatter")
    assert method.text.startswith("def scatter(")  # dedented out of its class
    with pytest.raises(ValueError, match="names no module"):
        source_of("learn_parallel.no_such_module.thing")


# -- the recorded runs missing ------------------------------------------------------------


def test_missing_recordings_fail_the_chapter_setup_loudly(tmp_path):
    """An install without the recorded runs (they ship with the package) stops at the setup
    cell with one error that says how to fix it, instead of half a chapter."""
    empty = tmp_path / "no-recordings"
    empty.mkdir()
    env = _simulated_env(LEARN_PARALLEL_DATA=str(empty), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", "from learn_parallel.lab.chapter import *"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"FileNotFoundError: {MISSING} {empty}: no chapters.json or bench")
    assert "reinstall it, or set LEARN_PARALLEL_DATA" in last


# -- the installed wheel, offline -------------------------------------------------------------

# Loaded first in every Python of the test environment (a .pth line runs at start-up):
# any connection, or name lookup, that leaves the machine fails.
BLOCK_NETWORK = """\
import socket

_LOCAL = {None, "", "localhost", "127.0.0.1", "::1", "0.0.0.0"}


def _check(address):
    host = address[0] if isinstance(address, tuple) else None
    if isinstance(address, tuple) and host not in _LOCAL:
        raise OSError(f"network disabled for this test: {address}")


_connect, _connect_ex, _getaddrinfo = (
    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
)


def connect(self, address):
    _check(address)
    return _connect(self, address)


def connect_ex(self, address):
    _check(address)
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    _check((host, 0))
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = (
    connect, connect_ex, getaddrinfo
)
"""


@pytest.fixture(scope="module")
def offline_venv(tmp_path_factory) -> Path:
    """A fresh venv outside the repository: the wheel, plus this environment's libraries."""
    work = tmp_path_factory.mktemp("standalone")
    src = work / "src"  # build from a copy, so the checkout gets no build/ folder
    shutil.copytree(
        ROOT / "learn_parallel",
        src / "learn_parallel",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    # setup.py adds the chapters (no outputs), the track's tests and the grading workflow
    # to the wheel, so the classroom tools work outside a clone.
    shipped = ["tests/classroom/track/test_tasks.py", ".github/classroom/autograde.yml"]
    shipped += [str(p.relative_to(ROOT)) for p in NOTEBOOKS]
    for name in ["pyproject.toml", "README.md", "setup.py", "MANIFEST.in", *shipped]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, src],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("learn_parallel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    recorded = "learn_parallel/lab/recorded"
    from learn_parallel.lab import records

    for machine in records.machines():
        shipped = (records.recorded_root() / machine).iterdir()
        assert {f"{recorded}/{machine}/{p.name}" for p in shipped} <= set(names)
    assert not [n for n in names if n.startswith(recorded) and not n.endswith((".json", ".gz"))]
    for name in shipped:
        assert f"learn_parallel/classroom/shipped/{name}" in names

    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", site, wheel],
        check=True,
        capture_output=True,
    )
    # torch, matplotlib, nbclient ... come from this environment's site-packages, listed as
    # a plain path: the .pth files there (an editable install of a checkout among them)
    # are not run, so the only learn_parallel the venv sees is the wheel's.
    (site / "zz_libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "_block_network.py").write_text(BLOCK_NETWORK)
    (site / "aa_block_network.pth").write_text("import _block_network\n")
    return python


def test_the_wheel_runs_a_chapter_offline(offline_venv, tmp_path):
    env = _simulated_env()
    env.pop("PYTHONPATH", None)
    env.pop("LEARN_PARALLEL_DATA", None)
    probe = subprocess.run(
        [
            offline_venv,
            "-c",
            "import sys, learn_parallel, urllib.request\n"
            "print(learn_parallel.__file__)\n"
            "try:\n"
            "    urllib.request.urlopen('https://pypi.org/simple/', timeout=5)\n"
            "    print('network: reachable')\n"
            "except OSError as e:\n"
            "    print('network: blocked')\n",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    installed, network = probe.stdout.splitlines()
    assert Path(installed).is_relative_to(offline_venv.parent.parent), installed
    assert network == "network: blocked"

    chapter = tmp_path / "scatter.ipynb"
    shutil.copy(BOOK / "scatter.ipynb", chapter)
    run = _execute_in(offline_venv, chapter, "print(lp.__file__)", env)  # whose lp it imported
    assert run.returncode == 0, run.stderr[-4000:]
    nb = nbformat.read(chapter, as_version=4)
    kernel_import = Path(nb.cells[-1].outputs[0]["text"].strip())
    assert kernel_import.is_relative_to(offline_venv.parent.parent), kernel_import
    setup = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    from learn_parallel.lab.measure import load_recorded

    assert f"recorded GPU runs: {load_recorded().hardware}, " in setup
    plots = [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and c.source.startswith("show(")
        and any("image/png" in o.get("data", {}) for o in c.outputs)
    ]
    assert plots, "no live-beside-recorded plot was drawn"
    shown = [o for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert any("learn_parallel/scatter_gather.py, lines" in o["data"]["text/html"] for o in shown)


def _execute_in(python: Path, notebook: Path, last_cell: str, env: dict[str, str]):
    """Execute ``notebook`` in place with ``python`` (a venv's), one cell appended at the end."""
    return subprocess.run(
        [
            python,
            "-c",
            "import sys, nbformat\n"
            "from nbclient import NotebookClient\n"
            "nb = nbformat.read(sys.argv[1], as_version=4)\n"
            "nb.cells.append(nbformat.v4.new_code_cell(sys.argv[2]))\n"
            "NotebookClient(nb, timeout=600, kernel_name='python3').execute()\n"
            "nbformat.write(nb, sys.argv[1])\n",
            notebook,
            last_cell,
        ],
        cwd=notebook.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_wheel_runs_the_teachers_guide_and_the_track_command(offline_venv, tmp_path):
    """Outside a clone the guide finds the chapters the wheel carries, and ``track OUT``
    writes the task tests (from the wheel too) instead of failing on a missing file."""
    # One simulated device: the fewest the guide meets (a laptop set to 1; every chapter's setup
    # raises it to 2), so this run is also test_any_hardware's run of the guide.
    env = _simulated_env(LEARN_PARALLEL_SIMULATED_DEVICES="1")
    env.pop("PYTHONPATH", None)
    env.pop("LEARN_PARALLEL_DATA", None)
    guide = tmp_path / "teaching.ipynb"
    shutil.copy(BOOK / "teaching.ipynb", guide)
    run = _execute_in(offline_venv, guide, "print(BOOK)", env)
    assert run.returncode == 0, run.stderr[-4000:]
    nb = nbformat.read(guide, as_version=4)
    book = Path(nb.cells[-1].outputs[0]["text"].strip())
    assert book.is_relative_to(offline_venv.parent.parent) and book.parts[-2:] == (
        "shipped",
        "book",
    ), book
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    from learn_parallel.classroom.notebooks import exercises

    with_exercises = [p for p in NOTEBOOKS if exercises(nbformat.read(p, as_version=4))]
    assert f"exercises in {len(with_exercises)} chapters" in text
    assert f"{len(with_exercises)} student copies" in text
    assert "submissions/ada/scatter.ipynb  scatter          2/2" in text
    assert "task_scatter    Scatter.forward" in text

    track = subprocess.run(
        [offline_venv, "-m", "learn_parallel.classroom", "track", tmp_path / "track"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert track.returncode == 0, track.stderr
    tests = (tmp_path / "track" / "tests" / "test_tasks.py").read_text()
    assert tests == (ROOT / "tests" / "classroom" / "track" / "test_tasks.py").read_text()
    assert not (tmp_path / "track" / "learn_parallel" / "classroom" / "shipped").exists()


def test_the_wheel_copies_its_chapters_into_a_folder_of_the_readers(offline_venv, tmp_path):
    """The README's command for the chapters outside a clone: every chapter the book has,
    as the wheel carries them (no outputs), into the folder named; the folder they come from
    without one."""
    env = _simulated_env()
    env.pop("PYTHONPATH", None)

    def chapters(*args):
        return subprocess.run(
            [offline_venv, "-m", "learn_parallel", "chapters", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = chapters("my-chapters")
    assert done.returncode == 0, done.stderr
    copied = sorted(p.name for p in (tmp_path / "my-chapters").iterdir())
    assert copied == sorted(p.name for p in NOTEBOOKS)
    assert done.stdout == (
        f"Copied {len(copied)} chapters into my-chapters; the first: "
        "jupyter lab my-chapters/intro.ipynb\n"
    )
    copy = nbformat.read(tmp_path / "my-chapters" / "scatter.ipynb", as_version=4).cells
    book = nbformat.read(BOOK / "scatter.ipynb", as_version=4).cells
    assert [c.source for c in copy] == [c.source for c in book]
    assert all(c.outputs == [] for c in copy if c.cell_type == "code")  # the wheel's copies
    source = Path(chapters().stdout.strip())
    assert source.is_relative_to(offline_venv.parent.parent) and source.parts[-2:] == (
        "shipped",
        "book",
    ), source


# -- launch links and the repository URL -----------------------------------------------------


def test_the_repository_and_site_urls_are_written_the_same_way_everywhere():
    """One repository URL (``_config.yml``'s, which the deploy workflow publishes from) and one
    site URL: GitHub Pages serves the repository ``org/name`` at ``org.github.io/name/``."""
    org, name = REPOSITORY.removeprefix("https://github.com/").split("/")
    assert f"https://{org}.github.io/{name}/" == SITE
    readme = (ROOT / "README.md").read_text()
    assert readme.count(REPOSITORY) == 1, "the README names the repository once"
    for path in [ROOT / "README.md", *NOTEBOOKS]:
        for url in re.findall(r"https://[\w.-]+\.github\.io/[^\s)\"'>]*", path.read_text()):
            assert url.startswith(SITE), f"{path.name} names the site as {url}, not {SITE}"
    for path in NOTEBOOKS:
        text = path.read_text()
        for url in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", text):
            if "learn-parallel" in url:  # links to PyTorch's sources are fine
                assert url == REPOSITORY, f"{path.name} names {url}, _config.yml {REPOSITORY}"
        if path.stem in NO_SOURCE:
            continue
        setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert f'REPO = "git+{REPOSITORY}"' in setup.source, path.name


def test_the_gpu_instructions_are_the_same_in_the_readme_and_the_intro():
    def block(text: str, heading: str) -> str:
        section = text[text.index(heading) :]
        return re.search(r"```bash\n(.*?)```", section, re.S).group(1)

    intro = "".join(c.source for c in nbformat.read(BOOK / "intro.ipynb", as_version=4).cells)
    readme = (ROOT / "README.md").read_text()
    assert block(readme, "## On a multi-GPU box") == block(intro, "## Running on GPUs")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if jupyter_book() is None:
        pytest.skip("jupyter-book is not installed (pip install -r requirements.txt)")
    return built_site(tmp_path_factory)


def test_launch_links_point_at_notebooks_in_the_repository(site):
    org_repo = REPOSITORY.removeprefix("https://github.com/")
    branch = CONFIG["repository"]["branch"]
    prefix = f"{CONFIG['launch_buttons']['colab_url']}/github/{org_repo}/blob/{branch}/"
    pages = sorted((site / "book").glob("*.html"))
    assert len(pages) == len(NOTEBOOKS)
    for page in pages:
        links = set(
            re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', page.read_text())
        )
        assert len(links) == 1, f"{page.name}: {links}"
        (link,) = links
        assert link.startswith(prefix), link
        path = link.removeprefix(prefix)
        assert "/./" not in link and not path.startswith("./"), link
        assert path == f"book/{page.stem}.ipynb" and (ROOT / path).is_file(), link
