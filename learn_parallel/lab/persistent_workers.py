"""How a step's replica forwards can run: fresh threads, persistent ones, or the caller.

Every runner calls the very same jobs (``with torch.cuda.device(i): replica(piece)``):

* `run_fresh_threads`: a new ``threading.Thread`` per replica per step, as
  ``torch.nn.parallel.parallel_apply`` does (which, like it, calls a lone job directly);
* `PersistentThreads`: one thread per device for the whole run (a single-worker
  ``ThreadPoolExecutor`` each), as ``learn_parallel`` does;
* `run_in_caller`: every forward in turn in the calling thread, a control.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device

Job = Callable[[], Any]


# [runners]
def job_of(replica: nn.Module, piece: torch.Tensor, device: Device) -> Job:
    def job() -> Any:
        with torch.cuda.device(device.index) if device.type == "cuda" else nullcontext():
            return replica(piece)

    return job


def run_fresh_threads(jobs: Sequence[Job]) -> list[Any]:
    """A new thread per job, started and joined on every call (one job: no thread)."""
    if len(jobs) == 1:
        return [jobs[0]()]
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class PersistentThreads:
    """One long-lived thread per device; job i always runs on thread i."""

    def __init__(self, count: int) -> None:
        self.pools = [ThreadPoolExecutor(max_workers=1) for _ in range(count)]

    def __call__(self, jobs: Sequence[Job]) -> list[Any]:
        futures = [pool.submit(job) for pool, job in zip(self.pools, jobs)]
        return [f.result() for f in futures]

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown()


def run_in_caller(jobs: Sequence[Job]) -> list[Any]:
    return [job() for job in jobs]


# [runners]
