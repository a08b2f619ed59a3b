"""One module per chapter, each registering its exercises' checks with `exercise`.

The predict-first exercises share `check_predictions`: the student's function predicts a
phase's least time from bytes and bandwidth, and passes within `TOLERANCE` of the floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

TOLERANCE = 0.01  # a prediction within 1 % of the floor passes: room for rounding, not for a factor


def check_predictions(
    fn: Callable[..., Any],
    cases: Sequence[tuple],
    floor_ms: Callable[..., float],
    what: Callable[..., str],
) -> str:
    """Assert ``fn(*case)`` is within `TOLERANCE` of ``floor_ms(*case)`` for every case;
    a failure names the case (``what(*case)``), the floor and the answer."""
    for case in cases:
        expected, got = floor_ms(*case), fn(*case)
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        assert number and abs(got - expected) <= TOLERANCE * expected, (
            f"{what(*case)}: the floor is {expected:.4g} ms, you said {got!r}"
        )
    return f"{len(cases)} cases within {TOLERANCE:.0%} of the floor"
