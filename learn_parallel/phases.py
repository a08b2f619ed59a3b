"""The hook the core calls at each phase of a step, and nothing else.

``scatter``, ``replicate``, each replica's ``forward`` and ``gather`` are wrapped
in ``with phase(name, device):``, and so are, in backward, the gradient's split
back to the devices (``grad scatter``) and the sum of the replicas' gradients onto
the source device (``reduce``). Two kinds of listener may be on: a recorder plugged
in with `set_listener` (the lab's ``Recorder``; the core never imports the lab),
and a PyTorch profiler, under which each phase is also a ``record_function`` range
named ``learn_parallel.<phase>`` (`` cuda:1`` appended for one device), beside the
``learn_parallel.DataParallel.forward`` range, as ``torch.nn.DataParallel`` marks
its own ``DataParallel.forward`` (the performance chapter compares the two). With
neither on, a phase costs a function call, a few global reads and one `getattr`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from torch.autograd import profiler as _profiler

Listener = Callable[[str, Any], AbstractContextManager]

_listener: Listener | None = None
_OFF = nullcontext()  # reused: being off allocates nothing


def _range(name: str, device: Any) -> AbstractContextManager:
    label = f"learn_parallel.{name}" if device is None else f"learn_parallel.{name} {device}"
    return _profiler.record_function(label)


def phase(name: str, device: Any = None) -> AbstractContextManager:
    """Mark one phase (``"scatter"``, ``"forward"`` ...) on ``device`` (None: all devices)."""
    listener = _listener
    # A plain Python flag that torch.profiler sets while it runs (read in any thread).
    profiling = getattr(_profiler, "_is_profiler_enabled", False)
    if listener is None:
        return _range(name, device) if profiling else _OFF
    if not profiling:
        return listener(name, device)
    return _both(_range(name, device), listener(name, device))


@contextmanager
def _both(outer: AbstractContextManager, inner: AbstractContextManager) -> Iterator[None]:
    with outer, inner:
        yield


def set_listener(listener: Listener | None) -> Listener | None:
    """Route every phase to ``listener`` (None: switch off); returns the previous one."""
    global _listener
    previous, _listener = _listener, listener
    return previous
