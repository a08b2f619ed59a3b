"""``python -m learn_parallel.classroom``: handouts, grading and the build-it-yourself track.

python -m learn_parallel.classroom handouts OUT        student copies of the chapters
python -m learn_parallel.classroom grade SUBMISSIONS   run each in a sandbox, print the scores
python -m learn_parallel.classroom track OUT           the package with tasks to write
python -m learn_parallel.classroom result RESULTS ID   exit 0 if ID passed (for CI steps)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from learn_parallel.classroom import files
from learn_parallel.classroom.sandbox import SANDBOXES, Limits
from learn_parallel.classroom.submissions import printable
from learn_parallel.classroom.track import TASKS


def _bytes(text: str) -> int:
    """``4G``, ``512M`` or a number of bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    scale = units.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _book() -> Path | None:
    """The chapters (a checkout's ``book/`` or the wheel's copies), or None."""
    try:
        return files.book()
    except FileNotFoundError:
        return None


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per job, a sentence and help for every argument."""
    parser = argparse.ArgumentParser(
        prog="python -m learn_parallel.classroom",
        description="Student copies, grading and the build-it-yourself track for the "
        "book's exercises (the teaching chapter shows each command at work).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    book = _book()

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=description)

    handouts = command(
        "handouts",
        "write student copies of the chapters",
        "Write a student copy of every chapter that has exercises into OUT: solution cells "
        "and the text that points at them removed, outputs cleared; with a copy of the package "
        "and a GitHub Classroom workflow, so OUT can be pushed as an assignment repository.",
    )
    handouts.add_argument(
        "out", type=Path, metavar="OUT", help="folder to write into (made if missing)"
    )
    handouts.add_argument(
        "--book",
        type=Path,
        default=book,
        help=f"folder of chapter notebooks to copy (default: {book or 'none found'})",
    )
    handouts.add_argument(
        "--no-package",
        action="store_true",
        help="only the notebooks (no package copy, no grading workflow)",
    )

    grade = command(
        "grade",
        "grade a folder of submitted notebooks",
        "Grade every chapter notebook under SUBMISSIONS: each notebook's cells run in a fresh "
        "Jupyter kernel in a sandbox of its own, each check's verdict is reached in this "
        "process; write the results (--json), then print a score per notebook and the message "
        "of every failed check (track copies: one point per task, by the teacher's tests).",
    )
    grade.add_argument(
        "submissions",
        type=Path,
        metavar="SUBMISSIONS",
        help="folder of submissions, searched at any depth (e.g. one folder per student)",
    )
    grade.add_argument(
        "--reference",
        type=Path,
        default=book,
        help="folder of reference notebooks: the exercises of a notebook are those of the "
        "reference chapter of the same name (a notebook named after no chapter is not "
        "graded), each called as that chapter's check cell calls it (default: the book)",
    )
    grade.add_argument("--timeout", type=int, default=60, help="seconds per cell (default 60)")
    grade.add_argument(
        "--notebook-timeout",
        type=int,
        default=Limits.seconds,
        help=f"seconds per notebook and per track copy, all cells together; past it the "
        f"submission is stopped and its remaining exercises score 0 (default {Limits.seconds})",
    )
    grade.add_argument(
        "--sandbox",
        choices=SANDBOXES,
        default="auto",
        help="where each submission's code runs. auto or bwrap (default): a bubblewrap sandbox "
        "(Linux, user namespaces): it sees the package read-only, its own copy of the "
        "submission and private folders, no network, no other process, none of your files. "
        "docker or podman: a container of --image. none: no sandbox, for where none can "
        "start (Linux; macOS untested; not native Windows: use WSL): then a student's "
        "code runs as you, so it can read your files, your environment and other students' "
        "notebooks, rewrite the other jobs of the run (a classmate's score with them), change "
        "the package and your files for later runs, reach the network, talk to a classmate's "
        "kernel, kill the grader, and leave processes running after grading; where you can "
        "write a folder the grader imports from (the folder you run grade from, which python "
        "-m puts first on its import path, or a virtual environment of your own), it can "
        "run code in the grader and decide any pass. Grade scores that count in a sandbox "
        "(the teacher's guide has the table)",
    )
    grade.add_argument(
        "--image", help="with --sandbox docker or podman: an image with Python, torch, nbclient"
    )
    grade.add_argument(
        "--memory",
        type=_bytes,
        default=Limits.memory,
        help="private memory per process of a submission (RLIMIT_DATA, which does not count "
        "shared mappings; with docker or podman: all memory, per container), and the size of its "
        "private /tmp and, in bubblewrap, /dev/shm, e.g. 2G (default 4G)",
    )
    grade.add_argument(
        "--kernel",
        default="python3",
        help="the Jupyter kernel the students' cells run in (default python3)",
    )
    grade.add_argument("--json", type=Path, help="also write the results here")
    grade.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks graded at once (default 1; at most one per core helps)",
    )
    grade.add_argument(
        "--classroom",
        type=Path,
        help="append one GitHub Classroom result per exercise to this file, as step outputs "
        "(the autograde workflow passes $GITHUB_OUTPUT)",
    )

    track = command(
        "track",
        "write the build-it-yourself copy of the package",
        "Write a copy of the package into OUT in which core functions are tasks (their bodies "
        "raise NotImplementedError), with each task's tests (python -m pytest -m TASK).",
    )
    track.add_argument(
        "out", type=Path, metavar="OUT", help="folder to write into (made if missing)"
    )
    track.add_argument(
        "--tasks",
        nargs="+",
        choices=[t.name for t in TASKS],
        help="the functions to turn into tasks (default: all of them)",
    )

    result = command(
        "result",
        "exit 0 if one exercise passed in a results file",
        "Print the result of EXERCISE from RESULTS, a file written by grade --json; exit 0 if it "
        "passed, 1 if it failed or was not graded (one CI step per exercise).",
    )
    result.add_argument(
        "results", type=Path, metavar="RESULTS", help="the results file (grade --json FILE)"
    )
    result.add_argument("exercise", metavar="EXERCISE", help="the exercise id, e.g. scatter-sizes")
    return parser


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of one subcommand (its errors show that subcommand's usage)."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "handouts":
        from learn_parallel.classroom.handouts import make_handouts

        if args.book is None or not args.book.is_dir():
            parser.error(f"no book folder at {args.book}; pass --book PATH/TO/book")
        for path in make_handouts(args.book, args.out, package=not args.no_package):
            print(path)
        return 0
    if args.command == "grade":
        return _grade(parser, args)
    if args.command == "track":
        from learn_parallel.classroom.track import make_track

        try:
            chosen = make_track(args.out, args.tasks)
        except FileNotFoundError as error:
            _subcommand(parser, "track").error(str(error))
        for task in chosen:
            print(f"{task.name}: {task.qualname} in {args.out / 'learn_parallel' / task.module}")
        return 0
    if args.command == "result":
        rows = json.loads(args.results.read_text())
        mine = [r for r in rows if r["exercise"] == args.exercise]
        if not mine:
            print(f"{args.exercise}: not graded")
            return 1
        for r in mine:
            verdict = "passed" if r["passed"] else f"FAILED {r['message']}"
            print(printable(f"{r['submission']}: {r['exercise']}: {verdict}"))
        return 0 if all(r["passed"] for r in mine) else 1
    return 2  # unreachable: argparse requires a command


def _grade(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Grade a class; the results file and Classroom outputs are written before the table
    is printed."""
    import os
    import signal

    from learn_parallel.classroom.grade import (
        NoSandbox,
        classroom_results,
        grade,
        table,
        write_json,
    )

    usage = _subcommand(parser, "grade")
    if not args.submissions.exists():
        usage.error(f"{args.submissions} does not exist")
    if args.reference is None or not args.reference.is_dir():
        usage.error(f"no reference chapters at {args.reference}; pass --reference PATH/TO/book")
    inside = args.submissions.resolve()
    if inside == files.PACKAGE or inside in files.PACKAGE.parents:
        usage.error(
            f"learn_parallel was imported from {files.PACKAGE}, inside the submissions: "
            "run the grader from another folder"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up as on Ctrl-C
    limits = Limits(args.memory, Limits.processes, args.notebook_timeout)
    if args.sandbox in ("auto", "bwrap") and os.geteuid() == 0:
        print(
            "note: run as root, the sandbox's process limit may not hold (some kernels exempt "
            "root from RLIMIT_NPROC): grade as an ordinary user",
            file=sys.stderr,
        )
    try:
        results = grade(
            args.submissions,
            args.reference,
            args.timeout,
            args.kernel,
            args.jobs,
            sandbox=_sandbox(args),
            limits=limits,
        )
    except NoSandbox as error:
        print(
            f"grade: no sandbox can start here ({error}); grade with --sandbox none "
            "to grade without one (see --help for what a student can then do)",
            file=sys.stderr,
        )
        return 2
    if not results and not results.ignored:
        usage.error(f"nothing to grade in {args.submissions}: no chapter notebook, no track")
    if args.json:
        write_json(results, args.json)
    if args.classroom:
        with args.classroom.open("a") as outputs:
            for exercise_id, encoded in classroom_results(results).items():
                outputs.write(f"{exercise_id}={encoded}\n")
    print(table(results))
    return 0


def _sandbox(args: argparse.Namespace):
    from learn_parallel.classroom.sandbox import choose

    return choose(args.sandbox, args.image)


if __name__ == "__main__":
    sys.exit(main())
