"""Exercises: the checks students run in the chapters, and the tools that grade them.

Every exercise has an id (``"scatter-sizes"``). A chapter's check cell calls
``check("scatter-sizes", chunk_sizes)``, and the autograder runs the very same check. Each
chapter's checks live in the `checks` subpackage and register themselves with `exercise`:
a check raises ``AssertionError`` saying what is wrong (the student and the grader both
report it as `CheckFailed`), and may return a short note printed when the answer passes.

The rest works on the notebooks: `notebooks` finds the exercise cells by their tags,
`handouts` writes the student copies, `grade` runs submissions (the student's code in a
kernel, the verdict in the grader: `judge`) and `track` writes the build-it-yourself copy
of the package. The teaching chapter (``book/teaching.ipynb``) shows each of them at work.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from html import escape
from typing import Any

# nbformat imports jsonschema, which imports rfc3987_syntax where installed (jupyterlab's
# dependencies install it) for a URI format no notebook uses: 1.2 s of grammar building per
# process. Refused before any submodule imports nbformat; jsonschema then skips that format.
sys.modules.setdefault("rfc3987_syntax", None)

Check = Callable[..., Any]
_CHECKS: dict[str, Check] = {}
_CHAPTERS: dict[str, str] = {}
_TITLES: dict[str, str] = {}
POINTS = 1  # what the grader gives an exercise whose check passes
# The chapters with exercises, in the book's order (tests/classroom/test_classroom.py compares it
# with _toc.yml); each has a check module of the same name.
CHAPTERS = (
    "intro",
    "devices",
    "source_device",
    "scatter",
    "replicate",
    "parallel_apply",
    "gather",
    "data_parallel",
    "distributed",
    "tuple_parallel",
    "options",
    "libtorch_replicate",
    "performance",
    "ladder",
    "pitfalls",
)

_LOADED: list[bool] = []  # [True] once every check is imported
GRADING_ENV = "LEARN_PARALLEL_GRADING"  # "1" while the autograder runs the checks


def exercise(exercise_id: str, title: str = "") -> Callable[[Check], Check]:
    """Register the decorated function as the check of ``exercise_id`` (``title``: the
    exercise's heading in its chapter, after "Exercise: ")."""

    def register(check_function: Check) -> Check:
        old = _CHECKS.get(exercise_id)
        same = old is not None and (old.__module__, old.__qualname__) == (
            check_function.__module__,
            check_function.__qualname__,
        )  # a reloaded module registers its check again
        if old is not None and not same:
            raise ValueError(f"Two checks registered for exercise {exercise_id!r}.")
        _CHECKS[exercise_id] = check_function
        _TITLES[exercise_id] = title
        _CHAPTERS[exercise_id] = check_function.__module__.rpartition(".")[2]
        return check_function

    return register


def _load_all() -> None:
    """Import the check module of every chapter in `CHAPTERS`, once: a module that later
    appears in ``checks/`` (say, written there by a submission) is never imported."""
    if _LOADED:
        return
    for chapter in CHAPTERS:
        importlib.import_module(f"learn_parallel.classroom.checks.{chapter}")
    _LOADED.append(True)


def exercises() -> list[str]:
    """Every exercise id, sorted."""
    _load_all()
    return sorted(_CHECKS)


def chapter_of(exercise_id: str) -> str:
    """The chapter (check module) an exercise belongs to."""
    _load_all()
    return _CHAPTERS[exercise_id]


class ExerciseTable:
    """Rows of (chapter, exercise id, title, points): an HTML table in Jupyter, in the built
    site and in nbconvert's HTML, aligned columns as plain text."""

    COLUMNS = ("chapter", "exercise", "title", "points")

    def __init__(self, rows: list[tuple[str, str, str, int]]) -> None:
        self.rows = rows

    def _repr_html_(self) -> str:
        def row(cells: list[str], tag: str) -> str:
            return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"

        head = row(list(self.COLUMNS), "th")
        body = [
            row([escape(chapter), f"<code>{escape(i)}</code>", escape(title), str(points)], "td")
            for chapter, i, title, points in self.rows
        ]
        return (
            f"<table>\n<thead>{head}</thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"
        )

    def __repr__(self) -> str:
        lines = [self.COLUMNS, *[tuple(str(c) for c in r) for r in self.rows]]
        widths = [max(len(line[k]) for line in lines) for k in range(len(self.COLUMNS))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines
        )


def exercise_table() -> ExerciseTable:
    """Every exercise (chapter, id, title, points) in the book's order, made from the
    registered checks: the teacher's guide shows this, so it cannot drift."""
    _load_all()
    order = {chapter: i for i, chapter in enumerate(CHAPTERS)}
    ids = sorted(_CHECKS, key=lambda i: (order.get(_CHAPTERS[i], len(order)), _CHAPTERS[i]))
    return ExerciseTable([(_CHAPTERS[i], i, _TITLES[i], POINTS) for i in ids])


def grading() -> bool:
    """True while the autograder runs: checks may then add hidden cases."""
    return os.environ.get(GRADING_ENV) == "1"


class CheckFailed(AssertionError):
    """A check's verdict: its message, and where in the student's code it failed, if it
    failed there (IPython shows just that, not the classroom package's frames)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where

    def _render_traceback_(self) -> list[str]:  # IPython's hook for a short traceback
        return [f"CheckFailed: {self}"] + ([f"  ({self.where})"] if self.where else [])


def _not_the_students(filename: str) -> bool:
    """Is this frame's file the package's, the standard library's or an installed one's?"""
    import sysconfig

    path = os.path.abspath(filename)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    return any(path.startswith(p + os.sep) for p in [package, *installed])


def _where(error: BaseException) -> str:
    """The innermost line of the student's own code in ``error``'s traceback, or "" when
    the check failed on a value the answer returned (no student line to point at)."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if not _not_the_students(f.filename)]
    if not mine:
        return ""
    frame = mine[-1]
    name = frame.filename
    # A notebook cell's code has no file (only a temporary name).
    name = os.path.basename(name) if os.path.exists(name) else "your cell"
    return f"{name}, line {frame.lineno}, in {frame.name}"


def failure_message(exercise_id: str, failure: BaseException) -> str:
    """What a failed check says: ``"<id>: <what is wrong>"`` (one line)."""
    if isinstance(failure, AssertionError):
        return f"{exercise_id}: {str(failure).removeprefix(f'{exercise_id}: ')}"
    return f"{exercise_id}: your answer raised {type(failure).__name__}: {failure}"


def check_message(exercise_id: str, failure: BaseException) -> str:
    """What the grader reports for a failed check: the line the student sees under the
    check cell, ``"CheckFailed: <id>: <what is wrong>"``."""
    return f"{CheckFailed.__name__}: {failure_message(exercise_id, failure)}"


def check(exercise_id: str, *answer: Any) -> None:
    """Run the check of ``exercise_id`` on the student's ``answer``.

    Raises `CheckFailed` (an AssertionError) with a message that says what is wrong (an
    answer that raises anything else is reported the same way); prints one line when the
    answer passes.
    """
    _load_all()
    if exercise_id not in _CHECKS:
        raise KeyError(
            f"No exercise called {exercise_id!r}; known exercises: {', '.join(sorted(_CHECKS))}."
        )
    try:
        note = _CHECKS[exercise_id](*answer)
    except Exception as error:
        raise CheckFailed(failure_message(exercise_id, error), _where(error)) from None
    print(f"check passed: {exercise_id}" + (f" ({note})" if note else ""))


def passes(exercise_id: str, *answer: Any) -> bool:
    """Does ``answer`` pass the check of ``exercise_id``? (quietly: for a chapter cell that
    uses the reader's answer only once it is right)."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(exercise_id, *answer)
    except AssertionError:
        return False
    return True
