"""The autograder: run submitted notebooks, then the same checks students run.

For each submitted chapter notebook, the grader runs the student's cells (without
their check and solution cells) in a fresh kernel with nbclient, then one grading
cell per exercise whose source is the *reference* check cell (``--reference``,
the book by default), so editing a check cell changes nothing. Every cell has a
time limit; a cell that runs over is interrupted and a kernel that dies is
restarted, so one hanging or crashing answer scores zero for its exercise and
never stops the grader. Checks see ``LEARN_PARALLEL_GRADING=1`` and may add
hidden cases.
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from learn_parallel.classroom import GRADING_ENV
from learn_parallel.classroom.notebooks import CHECK, SOLUTION, Exercise, exercises, tags

GRADING_TAG = "grading-check"


@dataclass
class Result:
    submission: str
    chapter: str
    exercise: str
    passed: bool
    message: str = ""


def _grading_cell(ex: Exercise) -> nbformat.NotebookNode:
    source = "from learn_parallel.classroom import check as check\n\n" + ex.check
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [GRADING_TAG]
    cell.metadata["exercise"] = ex.id
    return cell


def _outcome(cell: nbformat.NotebookNode, exercise_id: str, timeout: int) -> tuple[bool, str]:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            if output.ename in ("KeyboardInterrupt", "Timeout"):  # interrupted at the limit
                return False, f"Timeout: the check ran for more than {timeout} s"
            return False, f"{output.ename}: {output.evalue}".strip()
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")
    if f"check passed: {exercise_id}" in text:
        return True, ""
    return False, "the check did not run"


def _run(
    cells: list[nbformat.NotebookNode], workdir: Path, timeout: int, kernel_name: str
) -> tuple[list[nbformat.NotebookNode], int | None]:
    """Execute cells in order; return them and the index of the cell the kernel died in."""
    notebook = nbformat.v4.new_notebook(cells=cells)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={
            "ename": "Timeout",
            "evalue": f"the cell ran for more than {timeout} s and was interrupted",
            "traceback": [],
        },
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(workdir)}},
    )
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return notebook.cells, index
    return notebook.cells, None


def grade_notebook(
    path: Path,
    reference: list[Exercise] | None = None,
    timeout: int = 60,
    kernel_name: str = "python3",
) -> list[Result]:
    """Grade one submitted notebook; ``reference`` gives the exercises and their checks
    (by default, the check cells of the submission itself)."""
    submission = nbformat.read(str(path), as_version=4)
    chapter = path.stem
    to_grade = reference if reference is not None else exercises(submission)
    student = [c for c in submission.cells if not {CHECK, SOLUTION, GRADING_TAG} & set(tags(c))]
    results: dict[str, Result] = {}
    remaining = list(to_grade)
    while remaining:
        cells = [nbformat.from_dict(c) for c in student] + [_grading_cell(e) for e in remaining]
        executed, died_at = _run(cells, path.parent, timeout, kernel_name)
        for cell in executed[len(student) :]:
            exercise_id = cell.metadata["exercise"]
            if cell.get("execution_count") is not None:
                passed, message = _outcome(cell, exercise_id, timeout)
                results[exercise_id] = Result(str(path), chapter, exercise_id, passed, message)
        if died_at is None:
            break
        if died_at < len(student):  # the student's own cells kill the kernel: nothing to grade
            for ex in remaining:
                results.setdefault(
                    ex.id,
                    Result(str(path), chapter, ex.id, False, f"the kernel died in cell {died_at}"),
                )
            break
        dead = executed[died_at].metadata["exercise"]
        results[dead] = Result(str(path), chapter, dead, False, "the kernel died in the check")
        remaining = [ex for ex in remaining if ex.id not in results]
    return [
        results.get(ex.id, Result(str(path), chapter, ex.id, False, "not graded"))
        for ex in to_grade
    ]


def reference_exercises(reference: Path | None, chapter: str) -> list[Exercise] | None:
    if reference is None:
        return None
    notebook = reference / f"{chapter}.ipynb"
    if not notebook.exists():
        return None
    return exercises(nbformat.read(str(notebook), as_version=4))


def grade(
    submissions: Path,
    reference: Path | None = None,
    timeout: int = 60,
    kernel_name: str = "python3",
) -> list[Result]:
    """Grade every notebook under ``submissions`` (any depth) that has exercises."""
    results = []
    previous = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # the kernels inherit it: checks add hidden cases
    try:
        for path in sorted(Path(submissions).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            ref = reference_exercises(reference, path.stem)
            if ref is None and not exercises(nbformat.read(str(path), as_version=4)):
                continue
            results += grade_notebook(path, ref, timeout, kernel_name)
    finally:
        if previous is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = previous
    return results


def table(results: list[Result]) -> str:
    """A score per submission, and the check's message for every failed exercise."""
    lines = []
    by_submission: dict[str, list[Result]] = {}
    for result in results:
        by_submission.setdefault(result.submission, []).append(result)
    width = max((len(s) for s in by_submission), default=10)
    lines.append(f"{'submission':<{width}}  {'chapter':<16} score")
    for submission, rows in by_submission.items():
        score = sum(r.passed for r in rows)
        lines.append(f"{submission:<{width}}  {rows[0].chapter:<16} {score}/{len(rows)}")
        for r in rows:
            if not r.passed:
                message = textwrap.shorten(r.message, 300, placeholder=" ...")
                lines.append(f"    FAILED {r.exercise}: {message}")
    total = sum(r.passed for r in results)
    lines.append(f"total: {total}/{len(results)} passed")
    return "\n".join(lines)


def write_json(results: list[Result], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in results], indent=1))
