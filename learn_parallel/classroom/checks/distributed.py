"""Checks of the DistributedDataParallel chapter (book/distributed.ipynb)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.ladder.buckets import plan_buckets


class ThreadRanks:
    """``world`` ranks played by threads of this process, with a real (blocking) all-reduce.

    ``all_reduce(tensor)`` sums ``tensor`` in place across the ranks, as
    ``torch.distributed.all_reduce`` does, and returns only when every rank
    has called it: a rank that skips it leaves the others waiting (here for
    at most ``timeout_s`` seconds, then the check fails).
    """

    def __init__(self, world: int, timeout_s: float = 10.0) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=timeout_s)
        self.slots: list[torch.Tensor | None] = [None] * world
        self.calls = [0] * world

    def all_reduce_for(self, rank: int) -> Callable[[torch.Tensor], None]:
        def all_reduce(tensor: torch.Tensor) -> None:
            self.calls[rank] += 1
            self.slots[rank] = tensor.detach().clone()
            self.barrier.wait()  # everyone has put in their tensor
            total = torch.stack(self.slots).sum(0)  # type: ignore[arg-type]
            self.barrier.wait()  # everyone has read them
            tensor.copy_(total)

        return all_reduce


def _run_ranks(average_gradient: Callable[..., object], grads: list, world: int) -> dict:
    """Run the answer on ``world`` thread ranks where it lives; what each rank was left with."""
    ranks = ThreadRanks(world)
    failures: list[BaseException | None] = [None] * world

    def run(rank: int) -> None:
        try:
            average_gradient(grads[rank], ranks.all_reduce_for(rank), ranks.world)
        except BaseException as failure:  # noqa: BLE001 - re-raised below, in the caller
            failures[rank] = failure
            ranks.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    errors = [e for e in failures if e is not None]
    # A rank's own exception first; the others then only saw the barrier break.
    errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
    error = errors[0] if errors else None
    if error is not None and not isinstance(error, threading.BrokenBarrierError):
        raise error
    return {"stuck": error is not None, "calls": ranks.calls, "grads": grads}


@exercise("ddp-average-hook", "Average a gradient across ranks")
def check_average_gradient(average_gradient: Callable[..., object]) -> None:
    """``average_gradient(grad, all_reduce, world_size)`` leaves the mean over ranks in ``grad``."""
    for world in (2, 3):
        torch.manual_seed(world)
        grads = [torch.randn(5, dtype=torch.float64) for _ in range(world)]
        expected = torch.stack(grads).mean(0)
        ran = observe(_run_ranks, average_gradient, grads, world)
        if ran["stuck"]:
            raise AssertionError(
                f"With {world} ranks some rank waited in all_reduce for the others in vain: "
                "every rank must call all_reduce the same number of times."
            )
        for rank, grad in enumerate(ran["grads"]):
            if ran["calls"][rank] == 0:
                raise AssertionError(
                    f"Rank {rank} never called all_reduce: without it no rank learns about "
                    "the others' gradients."
                )
            if torch.allclose(grad, expected * world, atol=1e-12):
                raise AssertionError(
                    f"With {world} ranks, grad holds the sum over the ranks, not the mean: "
                    f"divide by world_size (all_reduce sums)."
                )
            if not torch.allclose(grad, expected, atol=1e-12):
                raise AssertionError(
                    f"With {world} ranks, rank {rank}'s grad should be the mean over ranks "
                    f"{expected.tolist()}, got {grad.tolist()}. Change grad in place (the "
                    "optimizer reads param.grad): all_reduce(grad) then grad.div_(world_size)."
                )


BUCKET_CASES = [
    ([4, 4, 4, 4], 8),
    ([4, 4, 4, 4], 12),
    ([1, 2, 3, 4, 5], 6),
    ([4, 100, 4], 8),
    ([16, 1, 1, 16], 16),
    ([3], 1),
    ([8, 8], 1000),
]


@exercise("ddp-buckets", "Fill the buckets")
def check_buckets(assign: Callable[[list[int], int], list[list[int]]]) -> None:
    """``assign(sizes_in_bytes, cap_bytes)`` groups parameter indices like our DDP does."""
    for sizes, cap in BUCKET_CASES:
        expected = plan_buckets([torch.empty(size, dtype=torch.uint8) for size in sizes], cap)
        got = assign(list(sizes), cap)
        if got != expected:
            raise AssertionError(
                f"assign({sizes}, cap_bytes={cap}) returned {got}; expected {expected}. "
                "Start from the last parameter, close a bucket when the next parameter would "
                "take it past the cap, and give a parameter bigger than the cap its own bucket."
            )
