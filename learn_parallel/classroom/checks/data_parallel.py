"""Checks for the DataParallel chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import machine

BATCHES = (10, 3, 1, 8)


def _replicas_used(cls) -> list | None:
    """Run the answer's class where it lives: what it counted (None: not a DataParallel)."""
    if not (isinstance(cls, type) and issubclass(cls, lp.DataParallel)):
        return None
    source = machine().source
    dp = cls(nn.Linear(2, 2).to(source))
    dp.replicas_used = []
    for rows in BATCHES:
        dp(torch.randn(rows, 2, device=source))
    return dp.replicas_used


@exercise("dp-counting", "Count the replicas")
def counting(cls) -> str:
    here = machine()
    used = observe(_replicas_used, cls)
    assert used is not None, "CountingDataParallel must be a subclass of lp.DataParallel"
    batches = BATCHES
    n = len(here.devices)
    expected = [len(torch.arange(rows).chunk(n)) for rows in batches]
    if n == 1:
        expected = []  # one device: the module is called directly, nothing is replicated
    assert used == expected, f"batches of {batches} rows: expected {expected}, got {used}"
    return str(used)


class _SliceDependent(nn.Module):
    """Depends on the size of its slice, so DataParallel is NOT equivalent here."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * x.shape[0]


@exercise("dp-equivalence", "Same gradients?")
def same_gradients(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 1)).to(here.source)
    x, y = torch.randn(9, 5, device=here.source), torch.randn(9, 1, device=here.source)
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)  # stale gradients: the answer must clear them
    assert fn(model, x, y) is True, "DataParallel and one device should agree on this model"
    leaky_agrees = fn(_SliceDependent().to(here.source), x, y)
    assert leaky_agrees is (len(here.devices) == 1), (
        "a model whose output depends on its slice size was reported as equivalent"
    )
    return "an equivalent and a slice-dependent model told apart"
