"""The book builds without a single warning, and its notebooks still produce their stored outputs.

Each chapter is executed once here, by nbval, and the other tests reuse that run:

* ``test_notebooks_match_stored_outputs``: nbval executes every ``book/*.ipynb`` on the
  default four simulated devices, fails on any cell that raises unless it is tagged
  ``raises-exception`` (as the executing build does), and compares each code cell's output
  with the one stored in the file (sanitized by ``tests/nbval_sanitize.cfg``). The stored
  outputs were made on simulated CPU devices, so this test is skipped on a GPU machine.
* ``test_book_builds_without_warnings``: ``jupyter-book build . -W --keep-going`` of every
  page from those stored outputs (which nbval has just shown a fresh run reproduces) turns
  any warning (a bad cross-reference, a missing page, an unknown output) into a failure.
  Every build here writes into a temporary folder: the reader's ``_build/`` stays theirs.
* ``test_the_executing_build_runs_a_chapter``: the README's build executes the chapters
  itself; this builds with execution on for one chapter, so the executing path (its
  kernel, the kernel_encryption extension, the raises-exception tags) is proven too.
* ``tests/book/test_any_hardware.py`` executes every chapter again on 2 devices.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _book import BOOK, ROOT, build, jupyter_book, shared_build

needs_jupyter_book = pytest.mark.skipif(
    jupyter_book() is None, reason="jupyter-book is not installed (pip install -r requirements.txt)"
)


def _simulated_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)  # the stored outputs use the default, 4
    env["LEARN_PARALLEL_SIMULATE"] = "1"  # ... on simulated devices, even on a GPU machine
    return env


def _assert_built_without_warnings(result, seconds: float, html: Path) -> None:
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"build failed after {seconds:.0f} s:\n{log[-6000:]}"
    # Every WARNING line counts, the kernels' own too (book/_ext/kernel_encryption.py keeps
    # ipykernel from warning about an unencrypted channel).
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, "build warnings:\n" + "\n".join(warnings)
    for chapter in BOOK.glob("*.ipynb"):
        assert (html / "book" / f"{chapter.stem}.html").exists(), chapter


@needs_jupyter_book
def test_book_builds_without_warnings(tmp_path_factory):
    result, seconds, html = shared_build(tmp_path_factory)  # the site the other tests read
    _assert_built_without_warnings(result, seconds, html)
    # The teacher's exercise table is an HTML table in the site, not markdown in a paragraph.
    page = (html / "book" / "teaching.html").read_text()
    header = r"<table[^>]*>\s*<thead>\s*<tr>\s*<th>chapter</th>\s*<th>exercise</th>"
    assert re.search(header, page), "the teaching page's exercise table is not a <table>"
    assert "| chapter | exercise |" not in page

    # Formulas: MathJax comes with the site (sphinx-mathjax-offline), never from a CDN.
    def mathjax(path: Path) -> list[str]:
        return re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', path.read_text(), re.I)

    assert mathjax(html / "book" / "distributed.html") == ["../_static/mathjax/tex-chtml.js"]
    for path in html.rglob("*.html"):
        assert all(src.endswith("_static/mathjax/tex-chtml.js") for src in mathjax(path)), path
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()


# A chapter whose cells show errors on purpose (its exercise checks, tagged
# raises-exception), print, plot, and start simulated devices in the kernel.
EXECUTED_BY_THE_BUILD = "scatter"


@needs_jupyter_book
def test_the_executing_build_runs_a_chapter(tmp_path):
    result, seconds = build(tmp_path, strict=True, only=EXECUTED_BY_THE_BUILD)
    _assert_built_without_warnings(result, seconds, tmp_path / "_build" / "html")
    log = result.stdout + result.stderr
    executed = [line for line in log.splitlines() if ": Executed notebook in " in line]
    assert len(executed) == 1, f"expected one executed chapter, got {executed}"
    assert f"book/{EXECUTED_BY_THE_BUILD}.ipynb: Executed" in executed[0], executed


def test_notebooks_are_stored_with_outputs():
    """nbval compares nothing in a cell that was never run, so every code cell must have run."""
    notebooks = sorted(BOOK.glob("*.ipynb"))
    assert len(notebooks) >= 12
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        never_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
        assert not never_run, f"{path.name}: code cells {never_run} have no stored outputs"
        if path.stem not in GUIDES:
            _assert_exercises(path.name, cells)


def test_no_chapter_keeps_a_merge_tools_conflict_record():
    """nbdime's merge writes the conflicts it could not resolve into cell metadata, where no
    reader sees them and every later execution keeps them: none may be committed."""
    kept = []
    for path in sorted(BOOK.glob("*.ipynb")):
        notebook = json.loads(path.read_text())
        for where, metadata in [("notebook", notebook["metadata"])] + [
            (f"cell {i}", c.get("metadata", {})) for i, c in enumerate(notebook["cells"])
        ]:
            kept += [f"{path.name} {where}: {k}" for k in metadata if k.startswith("nbdime")]
    assert kept == [], "resolve the merge, then delete these metadata keys"


GUIDES = {"teaching", "glossary"}  # the guide for instructors and the glossary: no exercises


def _assert_exercises(name: str, cells: list[dict]) -> None:
    """Exercises in plain cells (see the exercise format in the teacher's guide): at least
    two per chapter, every check cell tagged, every solution a tagged Markdown cell whose
    code sits in a collapsed ``<details>`` block labelled Solution (hidden until clicked in
    the site, Jupyter, Colab and nbconvert's HTML)."""

    def tagged(tag):
        return [c for c in cells if tag in c.get("metadata", {}).get("tags", [])]

    checks, solutions = tagged("exercise-check"), tagged("solution")
    assert len(checks) >= 2, f"{name}: fewer than two exercises"
    assert len(tagged("exercise-text")) == len(tagged("exercise-stub")) == len(checks), name
    assert len(solutions) == len(checks), f"{name}: one solution cell per exercise"
    for cell in checks:
        source = "".join(cell["source"])
        assert "raises-exception" in cell["metadata"]["tags"], f"{name}: untagged check cell"
        assert 'check("' in source, f"{name}: a check cell must call check(...)"
    for cell in solutions:
        source = "".join(cell["source"])
        assert cell["cell_type"] == "markdown", f"{name}: a solution in a code cell is visible"
        assert source.startswith("<details>\n<summary>Solution</summary>\n"), (
            f"{name}: a solution must open with a collapsed <details> labelled Solution"
        )
        assert source.rstrip().endswith("</details>") and "```python" in source, name
        assert "open" not in source.splitlines()[0], f"{name}: a solution shown open"
    text = "".join("".join(c["source"]) for c in cells)
    for directive in ("{exercise", "{solution"):
        assert directive not in text, f"{name}: Sphinx-only {directive} directive"


def test_every_notebook_is_a_chapter_in_the_table_of_contents():
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    stored = sorted(f"book/{path.stem}" for path in BOOK.glob("*.ipynb"))
    assert sorted(listed) == stored


def _with_code(path) -> bool:
    return any(c["cell_type"] == "code" for c in json.loads(path.read_text())["cells"])


def _batches(count: int) -> list[list[Path]]:
    """The chapters with code (the glossary has none), dealt into ``count`` batches of about
    equal size, so that parallel test workers share them out with few nbval start-ups."""
    chapters = sorted(
        (p for p in BOOK.glob("*.ipynb") if _with_code(p)), key=lambda p: -p.stat().st_size
    )
    batches: list[list[Path]] = [[] for _ in range(count)]
    for chapter in chapters:
        min(batches, key=lambda b: sum(p.stat().st_size for p in b)).append(chapter)
    return [sorted(b) for b in batches]


@pytest.mark.skipif(importlib.util.find_spec("nbval") is None, reason="nbval is not installed")
@pytest.mark.parametrize("chapters", _batches(4), ids=lambda b: "+".join(p.stem for p in b))
def test_notebooks_match_stored_outputs(chapters):
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        str(ROOT / "tests" / "nbval_sanitize.cfg"),
        "-p",
        "no:cacheprovider",
        "-q",
        *map(str, chapters),
    ]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=_simulated_env()
    )
    log = result.stdout[-8000:] + result.stderr[-2000:]
    assert result.returncode == 0, f"nbval failed:\n{log}"
