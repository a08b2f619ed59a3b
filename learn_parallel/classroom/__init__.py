"""Exercises: the checks students run in the chapters, and the tools that grade them.

Every exercise has an id (``"scatter-sizes"``). A chapter's check cell calls
``check("scatter-sizes", chunk_sizes)``; the autograder calls the very same
function. Each chapter's checks live in ``learn_parallel/classroom/checks/``
and register themselves with `exercise`. A check raises ``AssertionError``
with a message that says what is wrong, and may return a short note that is
printed when the answer passes.

The rest of the subpackage works on the notebooks: `notebooks` finds the
exercise cells by their tags, `handouts` writes the student copies, `grade`
runs submissions through the checks, and `track` builds the "write it
yourself" copy of the package (``python -m learn_parallel.classroom --help``).
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

GRADING_ENV = "LEARN_PARALLEL_GRADING"  # "1" while the autograder runs the checks


def exercise(exercise_id: str) -> Callable[[Check], Check]:
    """Register the decorated function as the check of ``exercise_id``."""

    def register(check_function: Check) -> Check:
        old = _CHECKS.get(exercise_id)
        same = old is not None and (old.__module__, old.__qualname__) == (
            check_function.__module__,
            check_function.__qualname__,
        )  # a reloaded module registers its check again
        if old is not None and not same:
            raise ValueError(f"Two checks registered for exercise {exercise_id!r}.")
        _CHECKS[exercise_id] = check_function
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


def grading() -> bool:
    """True while the autograder runs: checks may then add hidden cases."""
    return os.environ.get(GRADING_ENV) == "1"


def check(exercise_id: str, *answer: Any) -> None:
    """Run the check of ``exercise_id`` on the student's ``answer``.

    Raises AssertionError with a message that says what is wrong (an answer that
    raises anything else is reported the same way, with its error chained);
    prints one line when the answer passes.
    """
    _load_all()
    if exercise_id not in _CHECKS:
        raise KeyError(
            f"No exercise called {exercise_id!r}; known exercises: {', '.join(sorted(_CHECKS))}."
        )
    try:
        note = _CHECKS[exercise_id](*answer)
    except AssertionError as failure:
        raise AssertionError(f"{exercise_id}: {failure}") from None
    except Exception as error:
        raise AssertionError(
            f"{exercise_id}: your answer raised {type(error).__name__}: {error}"
        ) from error
    print(f"check passed: {exercise_id}" + (f" ({note})" if note else ""))
