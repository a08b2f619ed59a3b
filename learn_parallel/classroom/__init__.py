"""Exercises: the checks students run in the chapters, and the tools that grade them.

Every exercise has an id (``"scatter-sizes"``). A chapter's check cell calls
``check("scatter-sizes", chunk_sizes)``; the autograder calls the very same
function. Each chapter's checks live in ``learn_parallel/classroom/checks/``
and register themselves with `exercise`. A check raises ``AssertionError``
with a message that says what is wrong, and may return a short note that is
printed when the answer passes.

The rest of the subpackage works on the notebooks: `notebooks` finds the
exercise cells by their tags, `handouts` writes the student copies, `grade`
runs submissions through the checks (the student's code in a kernel, the
verdict in the grader: `judge`, with answers passed as `plain` data), and
`track` builds the "write it yourself" copy of the package
(``python -m learn_parallel.classroom --help``). `exercise_table` lists every
exercise for the teacher's guide.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any

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
    from learn_parallel.classroom import checks

    for info in pkgutil.iter_modules(checks.__path__):
        importlib.import_module(f"{checks.__name__}.{info.name}")


def exercises() -> list[str]:
    """Every exercise id, sorted."""
    _load_all()
    return sorted(_CHECKS)


def chapter_of(exercise_id: str) -> str:
    """The chapter (check module) an exercise belongs to."""
    _load_all()
    return _CHAPTERS[exercise_id]


def exercise_table() -> str:
    """Every exercise as a Markdown table (chapter, id, title, points), in the book's order,
    made from the registered checks: the teacher's guide shows this, so it cannot drift."""
    _load_all()
    order = {chapter: i for i, chapter in enumerate(CHAPTERS)}
    ids = sorted(_CHECKS, key=lambda i: (order.get(_CHAPTERS[i], len(order)), _CHAPTERS[i]))
    rows = ["| chapter | exercise | title | points |", "| --- | --- | --- | --- |"]
    rows += [f"| {_CHAPTERS[i]} | `{i}` | {_TITLES[i]} | {POINTS} |" for i in ids]
    return "\n".join(rows)


def grading() -> bool:
    """True while the autograder runs: checks may then add hidden cases."""
    return os.environ.get(GRADING_ENV) == "1"


class CheckFailed(AssertionError):
    """A check's verdict: its message, and one line saying where (IPython shows just that,
    not the classroom package's frames)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where

    def _render_traceback_(self) -> list[str]:  # IPython's hook for a short traceback
        return [f"CheckFailed: {self}"] + ([f"  ({self.where})"] if self.where else [])


def _where(error: BaseException) -> str:
    """The innermost line of the student's code (or else of the check) in ``error``'s
    traceback, with paths inside the package written relative to it."""
    import traceback

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(package)]
    frame = (mine or frames or [None])[-1]
    if frame is None:
        return ""
    name = os.path.abspath(frame.filename)
    if name.startswith(package):
        name = os.path.relpath(name, os.path.dirname(package))
    elif not os.path.exists(name):
        name = "your cell"  # a notebook cell's code has no file (only a temporary name)
    else:
        name = os.path.basename(name)
    return f"{name}, line {frame.lineno}, in {frame.name}"


def check_message(exercise_id: str, failure: BaseException) -> str:
    """What a failed check says, as the grader reports it (one line)."""
    if isinstance(failure, AssertionError):
        text = str(failure).removeprefix(f"{exercise_id}: ")
        return f"AssertionError: {exercise_id}: {text}"
    return f"AssertionError: {exercise_id}: your answer raised {type(failure).__name__}: {failure}"


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
        message = check_message(exercise_id, error).removeprefix("AssertionError: ")
        raise CheckFailed(message, _where(error)) from None
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
