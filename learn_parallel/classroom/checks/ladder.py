"""Checks of the chapter "How close can one process get?" (book/ladder.ipynb)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from learn_parallel.classroom import exercise
from learn_parallel.classroom.checks import check_predictions
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import forbid, machine
from learn_parallel.ladder.buckets import GradientBuckets, plan_buckets
from learn_parallel.ladder.fast import FastDataParallel
from learn_parallel.ladder.kept_replicas import move_into_flat

F32, F64 = torch.float32, torch.float64
CASES = [  # (bytes per parameter, dtypes, cap in bytes)
    ([40, 240, 20, 8, 4, 64], [F64, F64, F32, F64, F32, F64], 100),
    ([50, 50, 50], [F64, F64, F64], 100),  # last first: [1, 2] and [0]; first first: [0, 1], [2]
    ([16, 16, 16, 16], [F32, F64, F32, F64], 32),
    ([8, 800, 8], [F64, F64, F64], 100),
    ([4, 4, 8, 8], [F32, F32, F64, F64], 1000),
]


def real_plan(sizes: Sequence[int], dtypes: Sequence[torch.dtype], cap: int) -> list[list[int]]:
    """The buckets FastDataParallel makes for parameters of these sizes (bytes) and dtypes."""
    devices = machine().devices[:2]
    module = nn.Module()
    for i, (size, dtype) in enumerate(zip(sizes, dtypes)):
        numel = size // torch.empty(0, dtype=dtype).element_size()
        module.register_parameter(f"p{i}", nn.Parameter(torch.zeros(numel, dtype=dtype)))
    module.to(devices[0].torch_device)
    fast = FastDataParallel(module, devices, bucket_mb=cap / 2**20)
    return [bucket.positions for bucket in fast.buckets.buckets]


def _groups(buckets: list[list[int]]) -> list[list[int]]:
    """Which parameters travel together: the order of buckets and inside one is free here."""
    return sorted(sorted(bucket) for bucket in buckets)


@exercise("bucket-plan", "Plan the buckets")
def check_bucket_plan(
    plan_buckets_answer: Callable[[Sequence[int], Sequence[torch.dtype], int], list[list[int]]],
) -> None:
    for sizes, dtypes, cap in CASES:
        expected = real_plan(sizes, dtypes, cap)
        # Plan them yourself: asking FastDataParallel would only copy its answer.
        with forbid((FastDataParallel, "__init__"), (GradientBuckets, "__init__"), plan_buckets):
            got = plan_buckets_answer(list(sizes), list(dtypes), cap)
        names = [str(d).removeprefix("torch.") for d in dtypes]
        assert _groups(got) == _groups(expected), (
            f"For parameters of {list(sizes)} bytes, dtypes {names}, and a cap of {cap} bytes, "
            f"FastDataParallel makes buckets {expected}, you made {got}. A bucket holds one "
            f"dtype: plan each dtype's parameters on their own, last first (roughly the order "
            f"backward makes their gradients in), then give back positions in the whole "
            f"parameter list."
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


ALL_REDUCE_CASES = [  # (bytes per device, devices, NCCL bus bandwidth in GB/s)
    (46_758_048, 4, 350.0),
    (67_141_632, 8, 450.0),
    (1_000_000, 3, 100.0),
    (46_758_048, 2, 350.0),
]


def all_reduce_floor_ms(nbytes: int, n: int, bus_gb_per_s: float) -> float:
    """nccl-tests' bus bandwidth, turned back into a time: 2 (n - 1) / n of the bytes per link."""
    return 2 * (n - 1) / n * nbytes / (bus_gb_per_s * 1e9) * 1e3


@exercise("allreduce-floor", "Predict the all-reduce")
def check_all_reduce_floor(fn: Callable[[int, int, float], float]) -> str:
    def case(nbytes: int, n: int, bus: float) -> str:
        return f"all_reduce_ms({nbytes}, {n}, {bus}): {nbytes} bytes on each of {n} devices"

    return check_predictions(fn, ALL_REDUCE_CASES, all_reduce_floor_ms, case)
