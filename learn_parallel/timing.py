"""Per-device, per-phase timing of a DataParallel step (off unless switched on).

The core modules mark their phases with ``with phase(name, device):``. While
no recorder is active that is one global lookup and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_active: Any = None  # the recorder switched on, if any


@contextmanager
def phase(name: str, device: Any = None) -> Iterator[None]:
    """Mark one phase (``"scatter"``, ``"forward"`` ...) on ``device`` (None: all devices)."""
    recorder = _active
    if recorder is None:
        yield
        return
    with recorder.span(name, device):
        yield
