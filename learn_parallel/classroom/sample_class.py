"""A sample class for the teaching chapter: copies of one chapter handed in, graded, timed.

`hand_in` writes one submission per student from the chapter's student copy: solved, half
done (the first exercise solved) or untouched; `grade_timed` grades them with the command a
teacher types (in bubblewrap where it starts) and times it.
``python -m learn_parallel.classroom.sample_class OUT.json`` records one such run with the
machine it ran on, which the teaching chapter prints beside the run it makes itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from learn_parallel.classroom import files
from learn_parallel.classroom.handouts import student_copy
from learn_parallel.classroom.notebooks import CHECK, STUB, exercises, tags
from learn_parallel.classroom.sandbox import Bubblewrap

KINDS = ("solved", "half-done", "untouched")  # scores 2, 1 and 0 on a two-exercise chapter


def hand_in(
    book: Path, out: Path, students: dict[str, str], chapter: str = "scatter", trimmed: bool = False
) -> list[Path]:
    """Write ``out/<student>/<chapter>.ipynb`` for each ``student: kind`` (a kind of
    `KINDS`); ``trimmed`` keeps only the setup cell and each exercise's stub and check cells,
    not the prose between them (quicker to grade)."""
    book_copy = nbformat.read(Path(book) / f"{chapter}.ipynb", as_version=4)
    solutions = [ex.solutions[0] for ex in exercises(book_copy)]
    written = []
    for student, kind in students.items():
        if kind not in KINDS:
            raise ValueError(f"{student}: unknown kind {kind!r}; choose from {KINDS}")
        notebook = student_copy(book_copy)
        stubs = [c for c in notebook.cells if STUB in tags(c)]
        solved = {"solved": len(stubs), "half-done": 1, "untouched": 0}[kind]
        for stub, solution in list(zip(stubs, solutions))[:solved]:
            stub.source = solution
        if trimmed:
            setup = next(c for c in notebook.cells if c.cell_type == "code")
            notebook.cells = [setup] + [c for c in notebook.cells if {STUB, CHECK} & set(tags(c))]
        path = Path(out) / student / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, str(path))
        written.append(path)
    return written


def sandbox_here() -> tuple[str, str]:
    """The sandbox grading uses on this machine: ``("bwrap", "")`` where bubblewrap starts,
    else ``("none", why not)``."""
    problem = Bubblewrap().problem()
    return ("none", problem) if problem else ("bwrap", "")


def grade_timed(submissions: Path, jobs: int = 2, sandbox: str | None = None) -> dict:
    """Run ``python -m learn_parallel.classroom grade SUBMISSIONS --jobs N --sandbox S``
    (``S``: bubblewrap where it starts, else none); its wall time, the sandbox, each
    submission's score and the printed table."""
    sandbox = sandbox or sandbox_here()[0]
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results.json"
        command = ["grade", submissions.name, "--jobs", str(jobs), "--json", str(results)]
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "learn_parallel.classroom", *command, "--sandbox", sandbox],
            cwd=submissions.parent,
            capture_output=True,
            text=True,
            check=True,
        )
        seconds = time.perf_counter() - start
        rows = json.loads(results.read_text())
    scores: dict[str, int] = {}
    for row in rows:
        student = Path(row["submission"]).parent.name
        scores[student] = scores.get(student, 0) + row["passed"]
    return {
        "seconds": round(seconds, 1),
        "sandbox": sandbox,
        "scores": scores,
        "table": done.stdout,
    }


def _cpu() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def record(out: Path, students: int, jobs: int, chapter: str = "scatter") -> dict:
    """Grade a class of ``students`` whole student copies of ``chapter``; write the time,
    the scores and the machine (CPU, cores, load average before and after) to ``out``."""
    import torch

    names = {f"student-{n + 1:02d}": KINDS[n % len(KINDS)] for n in range(students)}
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "submissions"
        hand_in(files.book(), folder, names, chapter)
        load_before = os.getloadavg()
        graded = grade_timed(folder, jobs)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=files.PACKAGE, capture_output=True, text=True
    ).stdout.strip()
    recording = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "command": f"python -m learn_parallel.classroom.sample_class OUT --students {students} "
        f"--jobs {jobs} --chapter {chapter}",
        "chapter": chapter,
        "students": students,
        "jobs": jobs,
        "seconds": graded["seconds"],
        "sandbox": graded["sandbox"],
        "scores": graded["scores"],
        "machine": {
            "cpu": _cpu(),
            "cores": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
    }
    out.write_text(json.dumps(recording, indent=1) + "\n")
    return recording


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=record.__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--students", type=int, default=6, help="class size (default 6)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks graded at once")
    parser.add_argument("--chapter", default="scatter", help="the chapter handed in")
    args = parser.parse_args()
    print(json.dumps(record(args.out, args.students, args.jobs, args.chapter), indent=1))
