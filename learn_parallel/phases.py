"""The hook the core calls at each phase of a step, and nothing else.

``scatter``, ``replicate``, each replica's ``forward`` and ``gather`` are
wrapped in ``with phase(name, device):``. Nobody listens by default, so the
call is one global lookup returning a shared no-op context. A recorder (see
``learn_parallel.lab.timing``) plugs itself in with `set_listener`; the core
never imports the lab.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

Listener = Callable[[str, Any], AbstractContextManager]

_listener: Listener | None = None
_OFF = nullcontext()  # reused: being off allocates nothing


def phase(name: str, device: Any = None) -> AbstractContextManager:
    """Mark one phase (``"scatter"``, ``"forward"`` ...) on ``device`` (None: all devices)."""
    listener = _listener
    return _OFF if listener is None else listener(name, device)


def set_listener(listener: Listener | None) -> Listener | None:
    """Route every phase to ``listener`` (None: switch off); returns the previous one."""
    global _listener
    previous, _listener = _listener, listener
    return previous
