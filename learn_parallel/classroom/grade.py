"""The autograder: each submission's code runs in its sandbox, every verdict is reached here.

`grade` reads every submission (`submissions`) and loads every check from the installed
package before anything runs. Then, per chapter notebook, a job (`runner`, in the `sandbox`)
runs the student's cells (without their check and solution cells) in a fresh Jupyter kernel,
then one grading cell per exercise of the *reference* chapter (``--reference``, the book by
default; each exercise once) that calls the answer its check cell names. That cell runs the
check in the kernel and records what the answer returned (`judge.recorder`); the grader runs
the same check here on the recorded values (`judge.judge`): nothing the kernel prints or
patches decides a pass, but its record is taken as what the answer returned, so a record
forged with the right values passes (the teaching chapter's threat table). A track copy is
graded by the teacher's tests of each task. Each cell and each job has a time limit, and
whatever goes wrong (a malformed file, a crash, a timeout) costs only its own submission.
Checks see ``LEARN_PARALLEL_GRADING=1`` and may add hidden cases.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from learn_parallel.classroom import _CHECKS, _load_all, files
from learn_parallel.classroom import sandbox as sandboxes
from learn_parallel.classroom.judge import judge
from learn_parallel.classroom.notebooks import CHECK, SOLUTION, Exercise, exercises, tags
from learn_parallel.classroom.submissions import (
    Refused,
    copy_track,
    find,
    printable,
    read_notebook,
    read_regular,
)
from learn_parallel.classroom.track import TASKS, write_tests

GRADING_TAG = "grading-check"
_RUN_PREFIX = "learn-parallel-grade-"  # + the grader's process id: see `_run_folder`


@dataclass
class Result:
    submission: str
    chapter: str
    exercise: str
    passed: bool
    message: str = ""


class Graded(list):
    """The results, and a line for every notebook that was not graded (not a chapter)."""

    def __init__(self) -> None:
        super().__init__()
        self.ignored: list[str] = []


class NoSandbox(RuntimeError):
    """The sandbox asked for cannot start here."""


def _answer_call(ex: Exercise) -> str:
    """The ``check("id", answer...)`` call's arguments after the id, as source."""
    calls = [n for n in ast.walk(ast.parse(ex.check)) if isinstance(n, ast.Call)]
    calls = [n for n in calls if isinstance(n.func, ast.Name) and n.func.id == "check"]
    return ", ".join(ast.get_source_segment(ex.check, a) or "" for a in calls[-1].args[1:])


def _grading_cell(ex: Exercise, transcript: Path) -> nbformat.NotebookNode:
    source = (
        "from learn_parallel.classroom.judge import recorder as _grader_recorder\n\n"
        f"_grader_recorder({str(transcript)!r})({ex.id!r}, {_answer_call(ex)})\n"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = [GRADING_TAG]
    return cell


def reference_exercises(reference: Path, chapter: str) -> list[Exercise]:
    """The reference chapter's exercises with a registered check, each once (none if the
    chapter is not in the reference, or its notebook cannot be read)."""
    _load_all()
    try:
        found = exercises(read_notebook(reference / f"{chapter}.ipynb"))
    except (Refused, ValueError, SyntaxError):
        return []
    seen: set[str] = set()
    kept = [e for e in found if e.id in _CHECKS and not (e.id in seen or seen.add(e.id))]
    return kept


def _run_folder() -> Path:
    """A private folder for this run's jobs. Folders a killed grader left (its process
    id is in the name, and no such process runs) are removed first."""
    for old in Path(tempfile.gettempdir()).glob(f"{_RUN_PREFIX}*"):
        pid = old.name[len(_RUN_PREFIX) :].partition("-")[0]
        if not pid.isdigit() or old.is_symlink() or old.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's
    return Path(tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}{os.getpid()}-"))


def _spec(kind: str, box: sandboxes.Sandbox, limits: sandboxes.Limits, **fields) -> str:
    processes = limits.processes if box.applies_process_limit() else None
    job_limits = {"memory": limits.memory, "processes": processes}
    return json.dumps({"kind": kind, "limits": job_limits, **fields})


def _notebook_job(job: Path, notebook, to_grade, timeout: int, kernel: str, box, limits) -> None:
    student = [
        nbformat.v4.new_code_cell(c.source)
        for c in notebook.cells
        if c.cell_type == "code" and not {CHECK, SOLUTION, GRADING_TAG} & set(tags(c))
    ]
    (job / "out").mkdir(parents=True)
    grading = [_grading_cell(ex, job / "out" / f"{n}.pt") for n, ex in enumerate(to_grade)]
    nbformat.write(nbformat.v4.new_notebook(cells=student + grading), str(job / "cells.ipynb"))
    fields = {"student_cells": len(student), "timeout": timeout, "kernel": kernel}
    (job / "job.json").write_text(_spec("notebook", box, limits, **fields))


def _read_json(path: Path) -> dict:
    """A JSON object the job wrote (untrusted: read as data, at most 1 MiB), or {}."""
    try:
        data = json.loads(read_regular(path, 2**20))
    except (Refused, ValueError, RecursionError):
        return {}
    return data if type(data) is dict else {}


def _notebook_results(name, chapter, to_grade, job: Path, stopped: str) -> list[Result]:
    messages = _read_json(job / "out" / "messages.json")
    rows = []
    for n, ex in enumerate(to_grade):
        transcript = job / "out" / f"{n}.pt"
        if os.path.lexists(transcript):
            passed, message = judge(ex.id, transcript)
        elif type(messages.get(str(n))) is str:
            passed, message = False, messages[str(n)]
        else:
            passed, message = False, f"the notebook {stopped or 'ended before this check ran'}"
        rows.append(Result(name, chapter, ex.id, passed, printable(message)))
    return rows


def _track_results(name: str, job: Path, stopped: str) -> list[Result]:
    tasks = _read_json(job / "out" / "tasks.json")
    rows = []
    for task in TASKS:
        entry = tasks.get(task.name)
        passed = type(entry) is dict and entry.get("passed") is True
        summary = entry.get("summary") if type(entry) is dict else None
        message = "" if passed else summary or f"the tests {stopped or 'did not run'}"
        rows.append(Result(name, "track", task.name, passed, printable(message)))
    return rows


def grade(
    submissions: Path,
    reference: Path | None = None,
    timeout: int = 60,
    kernel_name: str = "python3",
    jobs: int = 1,
    sandbox: str | sandboxes.Sandbox = "auto",
    limits: sandboxes.Limits | None = None,
) -> Graded:
    """Grade every chapter notebook and track copy under ``submissions`` (any depth) against
    the ``reference`` chapters (the book by default), ``jobs`` at a time, each job in
    ``sandbox`` (a `sandbox.SANDBOXES` name, or a `sandbox.Sandbox`)."""
    box = sandboxes.choose(sandbox) if isinstance(sandbox, str) else sandbox
    problem = box.problem()
    if problem:
        raise NoSandbox(f"{box.name}: {problem}")
    limits = limits or sandboxes.Limits()
    _load_all()  # every check, from the installed package, before any student code runs
    reference = Path(reference) if reference is not None else files.book()
    found = find(Path(submissions))
    graded, run, work = Graded(), _run_folder(), []
    chapters: dict[str, list[Exercise]] = {}
    try:
        for path, notebook in found.notebooks:
            name = printable(path)
            if path.stem not in chapters:
                chapters[path.stem] = reference_exercises(reference, path.stem)
            to_grade = chapters[path.stem]
            if not to_grade:
                graded.ignored.append(f"{name}: not a chapter of the reference, not graded")
                continue
            if isinstance(notebook, Refused):
                reason = printable(f"not graded: {notebook}")
                graded.extend(Result(name, path.stem, e.id, False, reason) for e in to_grade)
                continue
            job = run / str(len(work)) / "job"
            _notebook_job(job, notebook, to_grade, timeout, kernel_name, box, limits)
            work.append((job, len(graded), (name, path.stem, to_grade)))
        for folder in found.tracks:
            name, job = printable(folder), run / str(len(work)) / "job"
            try:
                copy_track(folder, job)
            except Refused as refusal:
                graded.extend(Result(name, "track", t.name, False, str(refusal)) for t in TASKS)
                continue
            write_tests(job)  # the teacher's tests and settings, never the student's
            (job / "out").mkdir()
            # pytest's own limit comes first, so the job can still say which tasks passed
            fields = {"tasks": [t.name for t in TASKS], "timeout": max(1, limits.seconds - 15)}
            (job / "job.json").write_text(_spec("tests", box, limits, **fields))
            work.append((job, len(graded), (name,)))
        _run_jobs(box, work, limits, graded, max(1, jobs))
    finally:
        shutil.rmtree(run, ignore_errors=True)
    return graded


def _run_jobs(box, work: list, limits, graded: Graded, jobs: int) -> None:
    """Run every job, ``jobs`` at a time, and judge each one here as it ends (one thread
    judges: the checks' replay state is per process)."""
    pool = ThreadPoolExecutor(jobs)
    try:
        running = {
            pool.submit(sandboxes.run, box, job, job.parent / "log", limits): (n, job, at, what)
            for n, (job, at, what) in enumerate(work)
        }
        done: list[tuple[int, int, list[Result]]] = []
        for future in as_completed(running):
            n, job, at, what = running[future]
            try:
                stopped = future.result()
            except Exception as error:  # the sandbox did not start: this job only
                stopped = f"could not be run ({type(error).__name__}: {error})"
            if len(what) == 3:
                done.append((at, n, _notebook_results(*what, job, stopped)))
            else:
                done.append((at, n, _track_results(what[0], job, stopped)))
        for at, _, rows in sorted(done, key=lambda entry: entry[:2], reverse=True):
            graded[at:at] = rows  # in the order the submissions were found
    finally:
        sandboxes.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)


def table(results: list[Result]) -> str:
    """A score per submission, the check's message for every failed exercise, and the
    notebooks that were not graded."""
    lines = []
    by_submission: dict[str, list[Result]] = {}
    for result in results:
        by_submission.setdefault(printable(result.submission), []).append(result)
    width = max((len(s) for s in by_submission), default=10)
    lines.append(f"{'submission':<{width}}  {'chapter':<16} score")
    for submission, rows in by_submission.items():
        score = sum(r.passed for r in rows)
        lines.append(f"{submission:<{width}}  {printable(rows[0].chapter):<16} {score}/{len(rows)}")
        for r in rows:
            if not r.passed:
                lines.append(f"    FAILED {printable(r.exercise)}: {printable(r.message, 300)}")
    total = sum(r.passed for r in results)
    lines.append(f"total: {total}/{len(results)} passed")
    lines += [printable(line) for line in getattr(results, "ignored", [])]
    return "\n".join(lines)


def write_json(results: list[Result], path: Path) -> None:
    """Write the results to ``path`` at once (a reader sees the old file or the new one)."""
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".partial") as f:
        json.dump([asdict(r) for r in results], f, indent=1)
    os.replace(f.name, path)


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
