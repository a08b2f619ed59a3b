"""The tests' shared helpers: two training runs compared tensor by tensor (float64), and
calls of a device function counted."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from learn_parallel import devices as device_module

TOL = {"rtol": 1e-10, "atol": 1e-12}


def assert_same(a, b, tol: dict[str, float] = TOL) -> None:
    """Equal nested structures of tensors (outputs, gradients, parameters) within ``tol``.

    The parallel side may live on another device than the reference: both are compared
    on the host.
    """
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a.cpu(), b.cpu(), **tol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key], tol)
    else:
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, tol)


@contextmanager
def counting(name: str = "to_device") -> Iterator[list[int]]:
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
