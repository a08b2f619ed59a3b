"""The book builds without a single warning, and its notebooks still produce their stored outputs.

* ``test_book_builds``: ``jupyter-book build . -W --keep-going`` executes every chapter
  (simulated devices here) and turns any warning (a bad cross-reference, a notebook cell
  that raises unexpectedly, a kernel's own warning) into a failure.
* ``test_notebooks_match_stored_outputs``: nbval re-runs every ``book/*.ipynb`` and compares
  each code cell's output with the one stored in the file (sanitized by
  ``tests/nbval_sanitize.cfg``). The stored outputs were made on simulated CPU devices, so
  this test is skipped on a GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from _book import BOOK, ROOT, build, jupyter_book

needs_jupyter_book = pytest.mark.skipif(
    jupyter_book() is None, reason="jupyter-book is not installed (pip install -r requirements.txt)"
)


def _simulated_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)  # the stored outputs use the default, 4
    env["LEARN_PARALLEL_SIMULATE"] = "1"  # ... on simulated devices, even on a GPU machine
    return env


@needs_jupyter_book
def test_book_builds_without_warnings():
    result, seconds = build(strict=True)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"build failed after {seconds:.0f} s:\n{log[-6000:]}"
    # Every WARNING line counts, the kernels' own too (book/_ext/kernel_encryption.py keeps
    # ipykernel from warning about an unencrypted channel).
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, "build warnings:\n" + "\n".join(warnings)
    for chapter in BOOK.glob("*.ipynb"):
        assert (ROOT / "_build" / "html" / "book" / f"{chapter.stem}.html").exists(), chapter


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


@pytest.mark.skipif(importlib.util.find_spec("nbval") is None, reason="nbval is not installed")
def test_notebooks_match_stored_outputs():
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
        str(BOOK),
    ]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=_simulated_env()
    )
    log = result.stdout[-8000:] + result.stderr[-2000:]
    assert result.returncode == 0, f"nbval failed:\n{log}"
