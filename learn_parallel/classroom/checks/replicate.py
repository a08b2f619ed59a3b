"""Checks for the replicate chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.checks import check_predictions
from learn_parallel.classroom.tools import machine, spy


def measured_extra_bytes(model: nn.Module, ids: list[int]) -> int:
    """What the replicas keep once replicate returns: their tensors at addresses no tensor of
    the model had (flat buffers made on the way and freed are not counted)."""
    seen = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
    new = {}
    for replica in lp.replicate(model, ids):
        for t in [*replica.parameters(), *replica.buffers()]:
            if t.data_ptr() not in seen:
                new[(t.device, t.data_ptr())] = t.numel() * t.element_size()
    return sum(new.values())


@exercise("replicate-bytes", "What replicas cost")
def extra_bytes(fn) -> str:
    here = machine()
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2)).to(here.source)
    for n in range(1, len(here.devices) + 1):
        expected = measured_extra_bytes(m, here.ids[:n])
        got = fn(m, n)
        assert got == expected, f"n={n}: replicate allocated {expected} bytes, you said {got}"
    return f"e.g. {expected} bytes for {len(here.devices)} devices"


@exercise("replicate-grads", "DataParallel's gradients by hand")
def manual_grad(fn) -> str:
    here = machine()
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(here.source)
    x = torch.randn(10, 3, device=here.source)
    m[0].weight.grad = torch.full_like(m[0].weight, 7.0)  # stale: the answer must clear it
    with spy(scatter=lp.scatter, replicate=lp.replicate) as seen:
        got = fn(m, x).clone()
    assert seen.calls["scatter"] and seen.calls["replicate"], (
        "split x with lp.scatter and run one replica per slice (lp.replicate): "
        f"scatter was called {seen.calls['scatter']} times, replicate {seen.calls['replicate']}"
    )
    m.zero_grad()
    m(x).sum().backward()
    assert torch.allclose(got, m[0].weight.grad, atol=1e-6), "gradients differ from one device"
    return "same gradient as one device"


COPY_CASES = [  # (bytes, devices, GB/s of one copy between two devices)
    (16_793_600, 4, 350.0),
    (46_758_048, 2, 400.0),
    (1_000_000, 8, 50.0),
    (4096, 3, 25.0),
]


def copies_floor_ms(nbytes: int, n: int, gb_per_s: float) -> float:
    """One copy of ``nbytes`` to each of the n - 1 other devices, one after another."""
    return (n - 1) * nbytes / (gb_per_s * 1e9) * 1e3


@exercise("replicate-floor", "Predict the copies")
def copies_ms(fn) -> str:
    def case(nbytes: int, n: int, gb_per_s: float) -> str:
        return f"copies_ms({nbytes}, {n}, {gb_per_s}): {nbytes} bytes from the first of {n} devices"

    return check_predictions(fn, COPY_CASES, copies_floor_ms, case)
