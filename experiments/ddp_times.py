"""torch's DistributedDataParallel timed in its own processes, one per device.

The benchmark's DDP rows and the ladder's come from `time_ddp`. It starts the ranks
(`processes.run_ranks`: NCCL on GPUs, gloo processes on a CPU); every rank trains every
workload on its share of the batch with torch's DDP and times it (a step is as slow as
its slowest rank). On GPUs each rank can then also time DDP with its whole step captured
in one CUDA graph (`learn_parallel.lab.ddp_times`); where the capture is refused, the row
says why.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from learn_parallel.lab.ddp_times import CAPTURE_ENV, graphed_step
from learn_parallel.lab.processes import rank_device, rank_step_times, run_ranks, share
from learn_parallel.lab.steps import train_step
from learn_parallel.lab.workloads import Workload, build_model, make_batch


def time_ddp(
    workloads: Sequence[Workload],
    world: int,
    warmup: int,
    steps: int,
    backend: str,
    timeout_s: float,
    graphs: bool = True,
    lr: float = 0.01,
    seed: int = 0,
    cudnn_benchmark: bool = False,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per workload kind, ``{"ddp": result, "ddp_graphs": result}`` (the second with ``graphs``,
    on GPUs only); a result is ``{"status": "ok", "step_ms_all": [...]}`` or ``{"status":
    "failed", "note": why}``. Both rows come from the same processes, run with `CAPTURE_ENV`.
    """
    config = {
        "workloads": {w.kind: w.to_dict() for w in workloads},
        "warmup": warmup,
        "steps": steps,
        "lr": lr,
        "seed": seed,
        "graphs": graphs and backend == "nccl",
        "cudnn_benchmark": cudnn_benchmark,
    }
    with mock.patch.dict(os.environ, CAPTURE_ENV):  # spawned ranks inherit the environment
        ranks = run_ranks(rank_worker, world, args=(config,), backend=backend, timeout_s=timeout_s)
    return ranks[0]


def rank_worker(rank: int, world: int, config: dict[str, Any]) -> dict[str, Any]:
    """One rank: every workload with DDP, then (GPUs) with DDP's step in a CUDA graph."""
    device = rank_device(dist.get_backend(), rank)
    torch.backends.cudnn.benchmark = config["cudnn_benchmark"]
    out: dict[str, Any] = {}
    for kind, fields in config["workloads"].items():
        workload = Workload(**fields)
        rows = share(workload.batch, world, rank)
        if rows == 0:
            note = f"global batch {workload.batch} too small for {world} processes"
            out[kind] = {"ddp": {"status": "failed", "note": note}}
            continue
        x, y = make_batch(workload, rows, device, seed=config["seed"] + rank)
        out[kind] = {"ddp": _timed(_eager_step, workload, x, y, device, config)}
        if config["graphs"]:
            out[kind]["ddp_graphs"] = _timed(graphed_step, workload, x, y, device, config)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _timed(make: Callable, workload: Workload, x: Any, y: Any, device: Any, config: dict) -> dict:
    model = build_model(workload, config["seed"]).to(device)
    try:
        step = make(model, workload, x, y, device, config["lr"])
        failure = ""
    except Exception as error:  # noqa: BLE001 - a refused capture is a row, not a lost run
        step, failure = None, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    # Every rank must agree before the next collective: one refusal fails the row everywhere.
    agreed = torch.tensor([0.0 if failure else 1.0], device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if agreed.item() == 0.0:
        return {"status": "failed", "note": failure or "another rank failed to set up this step"}
    times = rank_step_times(step, device, config["warmup"], config["steps"])
    return {"status": "ok", "step_ms_all": times, "step_ms": statistics.median(times)}


def _eager_step(model, workload, x, y, device, lr) -> Callable[[], None]:
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    return lambda: train_step(ddp, x, y, workload, optimizer)
