"""What every equivalence test compares: two training runs, tensor by tensor, in float64."""

from __future__ import annotations

import torch

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
