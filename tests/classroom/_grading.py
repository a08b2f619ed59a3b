"""What the grading tests share: the sandbox this machine can start, and class folders.

Tests about grading itself (not about the sandbox) grade in bubblewrap where it starts and
without a sandbox elsewhere; tests of the sandbox skip, saying why, where it cannot start
(no user namespaces, not Linux, bubblewrap missing).
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from learn_parallel.classroom.notebooks import CHECK, SOLUTION, STUB, exercises, read, tags
from learn_parallel.classroom.sandbox import Bubblewrap

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
CHAPTER = "scatter"  # a short chapter, for the tests that execute notebooks
NO_BWRAP = Bubblewrap().problem()
SANDBOX = "bwrap" if NO_BWRAP is None else "none"
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"no sandbox here: {NO_BWRAP}")
BOTH = [pytest.param("bwrap", marks=needs_bwrap), "none"]
# For a test whose grading is the same with and without the sandbox (what the grader checks
# before a job starts, and the limits runner.py sets in both), the unsandboxed run adds only
# time where bubblewrap works: it runs where bubblewrap cannot. Cleanup, which each does its
# own way (bwrap's PID namespace, the runner as subreaper), keeps BOTH.
EITHER = [
    pytest.param("bwrap", marks=needs_bwrap),
    pytest.param(
        "none",
        marks=pytest.mark.skipif(
            NO_BWRAP is None, reason="graded the same way in the sandbox ([bwrap]) here"
        ),
    ),
]


def solutions() -> list[str]:
    return [ex.solutions[0] for ex in exercises(read(BOOK / f"{CHAPTER}.ipynb"))]


def notebook(stub_sources: list[str | None] | None, extra_cell: str = "", first_cell: str = ""):
    """The scatter handout (setup and exercise cells), its stubs replaced, one cell added
    last (``extra_cell``) and one right after the setup (``first_cell``)."""
    book = nbformat.read(str(BOOK / f"{CHAPTER}.ipynb"), as_version=4)
    setup = next(c for c in book.cells if c.cell_type == "code")
    cells = [c for c in book.cells if {STUB, CHECK} & set(tags(c)) and SOLUTION not in tags(c)]
    stubs = [c for c in cells if STUB in tags(c)]
    for cell, source in zip(stubs, stub_sources or []):
        if source is not None:
            cell.source = source
    first = [nbformat.v4.new_code_cell(first_cell)] if first_cell else []
    extra = [nbformat.v4.new_code_cell(extra_cell)] if extra_cell else []
    book.cells = [setup, *first, *cells, *extra]
    return book


def hand_in(folder: Path, students: dict[str, nbformat.NotebookNode]) -> None:
    """``folder/<student>/scatter.ipynb`` for each student."""
    for student, handed_in in students.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(handed_in, str(folder / student / f"{CHAPTER}.ipynb"))


def scores(results) -> dict[str, dict[str, bool]]:
    """{student folder: {exercise: passed}} from grade's results or a results file's rows."""
    found: dict[str, dict[str, bool]] = {}
    for r in results:
        row = r if isinstance(r, dict) else vars(r)
        found.setdefault(Path(row["submission"]).parent.name, {})[row["exercise"]] = row["passed"]
    return found


def running(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (a student's leftovers)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found
