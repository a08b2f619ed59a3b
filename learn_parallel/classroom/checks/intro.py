"""Checks for the introduction's warm-up exercises."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import machine


class Note(nn.Module):
    """The chapter's model: a linear layer that records the row ids of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.seen: list[list[int]] = []

    def forward(self, x: torch.Tensor, row_ids: torch.Tensor) -> torch.Tensor:
        self.seen.append(row_ids.tolist())
        return self.linear(x)


def _slices(rows: int, devices: int) -> list[int]:
    return [len(c) for c in torch.arange(rows).chunk(devices)]


def _rows_and_seen(fn, dp: lp.DataParallel, batch: int) -> tuple:
    """Run the answer where it lives; what it returned and what the model recorded."""
    got = fn(dp, batch)
    return got, [list(ids) for ids in dp.module.seen]


@exercise("intro-rows", "Rows per replica")
def rows_per_replica(fn) -> str:
    here = machine()
    model = Note().to(here.source)
    dp = lp.DataParallel(model)
    batches = (7, 10, 3, 1) + ((13, 2) if grading() else ())
    for batch in batches:
        model.seen.append([-1])  # left over from an earlier call: the answer must clear it
        got, seen = observe(_rows_and_seen, fn, dp, batch)
        expected = _slices(batch, len(here.devices))
        assert got == expected, f"{batch}-row batch: expected {expected}, got {got}"
        rows = sorted(r for ids in seen for r in ids)
        assert rows == list(range(batch)), (
            f"rows_per_replica(dp, {batch}) must clear dp.module.seen, run dp on that batch "
            f"(with row_ids) and count what it recorded; seen holds {seen}"
        )
    return f"{fn(dp, 7)} for 7 rows"


@exercise("intro-many", "Batches that leave a device idle")
def idle_batches(fn) -> str:
    n = len(machine().devices)
    limit = 100 if grading() else 40
    expected = [b for b in range(1, limit + 1) if len(_slices(b, n)) < n]
    got = fn(limit)
    assert got == expected, f"idle_batches({limit}) on {n} devices: expected {expected}, got {got}"
    return f"{len(got)} of {limit} batch sizes leave a device idle on {n} devices"
