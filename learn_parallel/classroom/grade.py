"""The autograder: the student's code runs in a kernel, the verdict is reached here.

For each submitted chapter notebook, the grader runs the student's cells (without their
check and solution cells) in a fresh Jupyter kernel (nbclient), in an empty temporary
folder, then one grading cell per exercise that calls the answer named in the *reference*
check cell (``--reference``, the book by default). That cell runs the check in the kernel
and records what the answer returned (`judge.recorder`); the grader then runs the same
check itself on the recorded values (`judge.judge`). Nothing the kernel prints or patches
decides a pass: not ``check``, not ``print``, not ``torch.equal``.

Every cell has a time limit: a cell that runs over is interrupted, and a kernel that dies
is restarted without the cell that killed it, so one hanging or crashing answer costs only
its own exercise. Checks see ``LEARN_PARALLEL_GRADING=1`` and may add hidden cases.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import tempfile
import textwrap
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from learn_parallel.classroom import GRADING_ENV, _load_all
from learn_parallel.classroom.judge import judge
from learn_parallel.classroom.notebooks import CHECK, SOLUTION, Exercise, exercises, tags

GRADING_TAG = "grading-check"
# Kept from the kernels: where CI steps read results and tokens (GitHub Actions' files).
_HIDDEN_ENV = ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_TOKEN")


@dataclass
class Result:
    submission: str
    chapter: str
    exercise: str
    passed: bool
    message: str = ""


def _answer_call(ex: Exercise) -> str:
    """The ``check("id", answer...)`` call's arguments after the id, as source."""
    tree = ast.parse(ex.check)
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "check"
    ]
    args = calls[-1].args[1:]
    return ", ".join(ast.get_source_segment(ex.check, a) or "" for a in args)


def _grading_cell(ex: Exercise, transcript: Path) -> nbformat.NotebookNode:
    source = (
        "from learn_parallel.classroom.judge import recorder as _grader_recorder\n\n"
        f"_grader_recorder({str(transcript)!r})({ex.id!r}, {_answer_call(ex)})\n"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [GRADING_TAG]
    cell.metadata["exercise"] = ex.id
    return cell


def _error(cell: nbformat.NotebookNode, timeout: int) -> str:
    for output in cell.get("outputs", []):
        if output.output_type == "error":
            if output.ename in ("KeyboardInterrupt", "Timeout"):  # interrupted at the limit
                return f"Timeout: the check ran for more than {timeout} s"
            return f"{output.ename}: {output.evalue}".strip()
    return "the check did not run"


def _kernel_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _HIDDEN_ENV}
    env[GRADING_ENV] = "1"  # checks add hidden cases
    return env


def _encrypted_channel() -> None:
    """Kernels on an encrypted channel where pyzmq can (as book/_ext/kernel_encryption.py
    does for the book build), so ipykernel has no unencrypted-TCP warning to print."""
    import zmq
    from jupyter_client.manager import KernelManager

    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is not None and zmq.has("curve"):
        trait.default_value = "auto"


def _client(notebook, workdir: Path, timeout: int, kernel_name: str) -> NotebookClient:
    return NotebookClient(
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


def grade_notebook(
    path: Path,
    reference: list[Exercise] | None = None,
    timeout: int = 60,
    kernel_name: str = "python3",
    notebook: nbformat.NotebookNode | None = None,
) -> list[Result]:
    """Grade one submitted notebook; ``reference`` gives the exercises and their checks
    (by default, the check cells of the submission itself)."""
    _load_all()  # the checks are imported here before any student code runs
    _encrypted_channel()
    submission = notebook or nbformat.read(str(path), as_version=4)
    chapter = path.stem
    to_grade = reference if reference is not None else exercises(submission)
    student = [c for c in submission.cells if not {CHECK, SOLUTION, GRADING_TAG} & set(tags(c))]
    results: dict[str, Result] = {}
    skipped: set[int] = set()  # student cells that killed the kernel: left out on restart
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        while True:
            remaining = [ex for ex in to_grade if ex.id not in results]
            died = _run(
                path, chapter, student, skipped, remaining, results, scratch, timeout, kernel_name
            )
            if died is None:
                break
            if died >= 0:
                skipped.add(died)
    return [results[ex.id] for ex in to_grade]


def _run(path, chapter, student, skipped, remaining, results, scratch, timeout, kernel_name):
    """One kernel's run; the index of the student cell the kernel died in, if it did."""
    workdir = Path(tempfile.mkdtemp(dir=scratch))  # the student's code runs here
    transcripts = Path(tempfile.mkdtemp(dir=scratch))
    cells = [nbformat.from_dict(c) for i, c in enumerate(student) if i not in skipped]
    indices = [i for i in range(len(student)) if i not in skipped]
    grading = [_grading_cell(ex, transcripts / f"{n}.pt") for n, ex in enumerate(remaining)]
    notebook = nbformat.v4.new_notebook(cells=cells + grading)
    client = _client(notebook, workdir, timeout, kernel_name)
    with client.setup_kernel(env=_kernel_env()):
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                if index < len(cells):
                    return indices[index]
                ex = remaining[index - len(cells)]
                message = "the kernel died in the check"
                results[ex.id] = Result(str(path), chapter, ex.id, False, message)
                return -1  # not a student cell: restart and grade the others
            if index < len(cells):
                cell.outputs = [o for o in cell.outputs if o.output_type == "error"]
                continue
            ex = remaining[index - len(cells)]
            transcript = transcripts / f"{index - len(cells)}.pt"
            if transcript.exists():
                passed, message = judge(ex.id, transcript)
            else:
                passed, message = False, _error(cell, timeout)
            results[ex.id] = Result(str(path), chapter, ex.id, passed, message)
    return None


def reference_exercises(reference: Path | None, chapter: str) -> list[Exercise] | None:
    if reference is None:
        return None
    notebook = reference / f"{chapter}.ipynb"
    if not notebook.exists():
        return None
    return exercises(nbformat.read(str(notebook), as_version=4))


def _grade_one(job: tuple) -> list[Result]:
    path, notebook, ref, timeout, kernel_name = job
    return grade_notebook(path, ref, timeout, kernel_name, notebook)


def grade(
    submissions: Path,
    reference: Path | None = None,
    timeout: int = 60,
    kernel_name: str = "python3",
    jobs: int = 1,
) -> list[Result]:
    """Grade every notebook under ``submissions`` (any depth) that has exercises, ``jobs``
    notebooks at a time. Every notebook is read before any student code runs."""
    work = []
    for path in sorted(Path(submissions).rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        notebook = nbformat.read(str(path), as_version=4)
        ref = reference_exercises(reference, path.stem)
        if ref is None and not exercises(notebook):
            continue
        work.append((path, notebook, ref, timeout, kernel_name))
    previous = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # the judge's checks add the same hidden cases
    try:
        if jobs > 1 and len(work) > 1:
            with ProcessPoolExecutor(jobs) as pool:
                return [r for rows in pool.map(_grade_one, work) for r in rows]
        return [r for job in work for r in _grade_one(job)]
    finally:
        if previous is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = previous


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


def classroom_results(results: list[Result]) -> dict[str, str]:
    """One GitHub Classroom runner result per exercise (what autograding-grading-reporter
    reads from ``<ID>_RESULTS``: base64 of its JSON), one point each."""
    encoded = {}
    for r in results:
        test = {
            "name": r.exercise,
            "status": "pass" if r.passed else "fail",
            "message": r.message,
            "score": 1 if r.passed else 0,
        }
        report = {"version": 1, "status": test["status"], "max_score": 1, "tests": [test]}
        encoded[r.exercise] = base64.b64encode(json.dumps(report).encode()).decode()
    return encoded
