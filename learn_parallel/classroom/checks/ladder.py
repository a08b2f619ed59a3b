"""Checks of the chapter "How close can one process get?" (book/ladder.ipynb)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import forbid, machine
from learn_parallel.variants.fast import FastDataParallel, move_into_flat

CASES = [([10, 10, 10, 10], 20), ([5, 30, 5, 1, 1], 12), ([4], 100), ([8, 8, 8], 8), ([3, 9, 2], 5)]


def real_plan(sizes: Sequence[int], cap: int) -> list[list[int]]:
    """The buckets FastDataParallel makes for float32 parameters of ``sizes`` bytes."""
    devices = machine().devices[:2]
    module = nn.Module()
    for i, size in enumerate(sizes):
        module.register_parameter(f"p{i}", nn.Parameter(torch.zeros(size // 4)))
    module.to(devices[0].torch_device)
    fast = FastDataParallel(module, devices, bucket_mb=cap / 2**20)
    return [bucket.positions for bucket in fast._buckets]


@exercise("bucket-plan", "Plan the buckets")
def check_bucket_plan(plan_buckets: Callable[[Sequence[int], int], list[list[int]]]) -> None:
    for sizes, cap in CASES:
        sizes_bytes = [4 * s for s in sizes]
        expected = real_plan(sizes_bytes, 4 * cap)
        # Plan them yourself: asking FastDataParallel would only copy its answer.
        with forbid((FastDataParallel, "__init__"), (FastDataParallel, "_build_buckets")):
            got = plan_buckets(sizes_bytes, 4 * cap)
        assert got == expected, (
            f"For parameter sizes {sizes_bytes} bytes and a cap of {4 * cap} bytes, "
            f"FastDataParallel makes buckets {expected}, you made {got}. Walk the parameters "
            f"last first (backward's order) and close a bucket once it holds the cap or more."
        )


def _refreshed(refresh, originals: list, replica: list, flat: torch.Tensor) -> dict:
    """Run the answer where it lives; what it left in the replica and the flat buffer."""
    addresses = [p.data_ptr() for p in replica]
    refresh(originals, replica, flat)
    return {
        "same_memory": [p.data_ptr() for p in replica] == addresses,
        "replica": [p.detach() for p in replica],
        "leaves": [p.is_leaf and p.requires_grad for p in replica],
        "flat": flat,
    }


@exercise("refresh-in-place", "Refresh a replica in place")
def check_refresh_in_place(refresh: Callable[..., None]) -> None:
    """``refresh(originals, replica_params, flat)``: new values, same memory."""
    devices = machine().devices[:2]
    assert len(devices) >= 2, "This check needs two devices (simulated ones will do)."
    source, target = devices[0].torch_device, devices[-1].torch_device
    shapes = [(3, 4), (4,), (2, 2, 2)]
    originals = [torch.randn(s, dtype=torch.double, device=source) for s in shapes]
    replica = [nn.Parameter(torch.zeros(s, dtype=torch.double, device=target)) for s in shapes]
    flat = move_into_flat(replica, target)
    for o in originals:
        o.mul_(3).add_(1)  # the optimizer stepped: the replica is stale
    after = observe(_refreshed, refresh, originals, replica, flat)
    assert after["same_memory"], (
        "A replica parameter moved to new memory: a CUDA graph captured the old address "
        "and would keep reading stale weights. Copy into the existing memory instead."
    )
    for i, (p, leaf, o) in enumerate(zip(after["replica"], after["leaves"], originals)):
        assert torch.equal(p, o.to(target)), f"Replica parameter {i} was not refreshed."
        assert leaf, (
            f"Replica parameter {i} is no longer a trainable leaf: refresh under torch.no_grad()."
        )
    expected = torch.cat([o.reshape(-1) for o in originals]).to(target)
    assert torch.equal(after["flat"], expected), "The flat buffer does not hold the new values."
