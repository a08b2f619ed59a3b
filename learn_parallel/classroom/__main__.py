"""``python -m learn_parallel.classroom``: handouts, grading and the build-it-yourself track.

python -m learn_parallel.classroom handouts OUT        student copies of the chapters
python -m learn_parallel.classroom grade SUBMISSIONS   run the checks, print the scores
python -m learn_parallel.classroom track OUT           the package with tasks to write
python -m learn_parallel.classroom result RESULTS ID   exit 0 if ID passed (for CI steps)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from learn_parallel.classroom import files
from learn_parallel.classroom.track import TASKS


def _book() -> Path | None:
    """The chapters (a checkout's ``book/`` or the wheel's copies), or None."""
    try:
        return files.book()
    except FileNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m learn_parallel.classroom")
    commands = parser.add_subparsers(dest="command", required=True)

    handouts = commands.add_parser("handouts", help="write student copies of the chapters")
    handouts.add_argument("out", type=Path)
    handouts.add_argument("--book", type=Path, default=_book())
    handouts.add_argument(
        "--no-package",
        action="store_true",
        help="only the notebooks (no package copy, no grading workflow)",
    )

    grade = commands.add_parser("grade", help="grade a folder of submitted notebooks")
    grade.add_argument("submissions", type=Path)
    grade.add_argument(
        "--reference",
        type=Path,
        default=_book(),
        help="folder of reference notebooks whose check cells are used (default: the book; "
        "without it, each submission's own check cells)",
    )
    grade.add_argument("--timeout", type=int, default=60, help="seconds per cell (default 60)")
    grade.add_argument("--kernel", default="python3")
    grade.add_argument("--json", type=Path, help="also write the results here")
    grade.add_argument(
        "--jobs", type=int, default=1, help="notebooks graded at once (default 1; one per core)"
    )
    grade.add_argument(
        "--classroom",
        type=Path,
        help="append one GitHub Classroom result per exercise to this file, as step outputs "
        "(the autograde workflow passes $GITHUB_OUTPUT)",
    )

    track = commands.add_parser("track", help="write the build-it-yourself copy of the package")
    track.add_argument("out", type=Path)
    track.add_argument("--tasks", nargs="+", choices=[t.name for t in TASKS])

    result = commands.add_parser("result", help="exit 0 if one exercise passed in a results file")
    result.add_argument("results", type=Path)
    result.add_argument("exercise")

    args = parser.parse_args(argv)
    if args.command == "handouts":
        from learn_parallel.classroom.handouts import make_handouts

        if args.book is None or not args.book.is_dir():
            parser.error(f"no book folder at {args.book}; pass --book PATH/TO/book")
        for path in make_handouts(args.book, args.out, package=not args.no_package):
            print(path)
        return 0
    if args.command == "grade":
        from learn_parallel.classroom.grade import grade as run_grade
        from learn_parallel.classroom.grade import table, write_json
        from learn_parallel.classroom.track import run_task

        if not args.submissions.exists():
            parser.error(f"{args.submissions} does not exist")
        results = run_grade(
            args.submissions, args.reference, args.timeout, args.kernel, max(1, args.jobs)
        )
        for folder in sorted({p.parent for p in args.submissions.rglob("test_tasks.py")}):
            from learn_parallel.classroom.grade import Result

            for task in TASKS:
                passed, message = run_task(folder.parent, task.name)
                results.append(Result(str(folder.parent), "track", task.name, passed, message))
        if not results:
            parser.error(f"nothing to grade in {args.submissions}: no notebook with exercises")
        print(table(results))
        if args.json:
            write_json(results, args.json)
        if args.classroom:
            from learn_parallel.classroom.grade import classroom_results

            with args.classroom.open("a") as outputs:
                for exercise_id, encoded in classroom_results(results).items():
                    outputs.write(f"{exercise_id}={encoded}\n")
        return 0
    if args.command == "track":
        from learn_parallel.classroom.track import make_track

        try:
            chosen = make_track(args.out, args.tasks)
        except FileNotFoundError as error:
            track.error(str(error))
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
            print(f"{r['exercise']}: {'passed' if r['passed'] else 'FAILED ' + r['message']}")
        return 0 if all(r["passed"] for r in mine) else 1
    return 2  # unreachable: argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
