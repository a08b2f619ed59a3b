"""Which side of grading this process is on: a notebook, the recording kernel, or the grader.

`judge` switches it while it records or replays a check; the spies of `tools` read it,
since while the grader replays recorded answers there is no student code for them to watch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

LOCAL, KERNEL, JUDGE = "local", "kernel", "judge"
_current = [LOCAL]  # one per process (answers may run in threads)


def role() -> str:
    """``"local"`` in a notebook or under pytest, ``"kernel"`` while recording, ``"judge"``
    while the grader replays."""
    return _current[0]


def judging() -> bool:
    """True while the grader replays: nothing of the student's runs, spies have nothing
    to see (the kernel's run already applied them)."""
    return role() == JUDGE


@contextlib.contextmanager
def acting_as(name: str) -> Iterator[None]:
    """This process plays ``name`` (`KERNEL` or `JUDGE`) while the block runs."""
    previous, _current[0] = _current[0], name
    try:
        yield
    finally:
        _current[0] = previous
