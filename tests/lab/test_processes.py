"""Two `run_ranks` jobs started together on one machine both succeed.

Each run's ranks meet at a TCP store that the parent binds to port 0 before it spawns them,
so the OS gives every run its own port and keeps it taken until the ranks are done (before,
a port was picked, released and bound again later, and two runs could get the same one).
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from learn_parallel.lab.processes import run_ranks


def _sum_of_ranks(rank: int, world: int, offset: int) -> float:
    total = torch.tensor([float(rank + offset)])
    dist.all_reduce(total)
    return total.item()


def test_two_runs_started_together_both_succeed():
    results: dict[int, object] = {}

    def run(offset: int) -> None:
        try:
            results[offset] = run_ranks(
                _sum_of_ranks, 2, args=(offset,), timeout_s=150, group_timeout_s=60, threads=1
            )
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            results[offset] = error

    threads = [threading.Thread(target=run, args=(offset,)) for offset in (0, 10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(200)
    # Each run's ranks met only each other: 0 + 1, and 10 + 11.
    assert results == {0: [1.0, 1.0], 10: [21.0, 21.0]}
