"""Exercises: the checks students run in the chapters, and the tools that grade them.

Every exercise has an id (``"scatter-sizes"``). A chapter's check cell calls
``check("scatter-sizes", chunk_sizes)``; the autograder calls the very same
function. Each chapter's checks live in ``learn_parallel/classroom/checks/``
and register themselves with `exercise`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

Check = Callable[..., Any]
_CHECKS: dict[str, Check] = {}


def exercise(exercise_id: str) -> Callable[[Check], Check]:
    """Register the decorated function as the check of ``exercise_id``."""

    def register(check_function: Check) -> Check:
        if exercise_id in _CHECKS and _CHECKS[exercise_id] is not check_function:
            raise ValueError(f"Two checks registered for exercise {exercise_id!r}.")
        _CHECKS[exercise_id] = check_function
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


def check(exercise_id: str, *answer: Any) -> None:
    """Run the check of ``exercise_id`` on the student's ``answer``.

    Raises AssertionError with a message that says what is wrong; prints one line
    when the answer passes.
    """
    _load_all()
    if exercise_id not in _CHECKS:
        raise KeyError(
            f"No exercise called {exercise_id!r}; known exercises: {', '.join(sorted(_CHECKS))}."
        )
    _CHECKS[exercise_id](*answer)
    print(f"check passed: {exercise_id}")
