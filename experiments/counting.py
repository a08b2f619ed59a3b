"""Count the calls of one `learn_parallel.devices` function, wherever the package calls it.

Used by ``experiments/host_time.py`` (device ids parsed per forward: calls of ``_parse``,
in its record) and by ``tests/core/test_resolve_once.py``; it imports nothing from the lab.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from learn_parallel import devices as device_module


@contextmanager
def counting(name: str = "_parse") -> Iterator[list[int]]:
    """Count calls of ``learn_parallel.devices.<name>`` from every loaded package module.

    Modules import the function by name, so each module's reference is swapped.
    """
    original = getattr(device_module, name)
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    patched = [
        module
        for module_name, module in list(sys.modules.items())
        if module_name.startswith("learn_parallel") and getattr(module, name, None) is original
    ]
    for module in patched:
        setattr(module, name, counted)
    try:
        yield calls
    finally:
        for module in patched:
            setattr(module, name, original)
