"""Per-rank work that shows `learn_parallel.DistributedDataParallel` is right (the DDP chapter).

Each ``*_worker`` runs in one process of `processes.run_ranks` and returns plain tensors,
which the caller compares with `reference_training`, the same training in one process, in
float64 ("equal" means to about 1e-12). With uneven shares every rank's loss is the mean
over *its own* rows and DDP averages the ranks' gradients: the gradient of the mean of the
per-rank means, which is the global mean's only when every rank has as many rows.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from learn_parallel.lab.processes import rank_device
from learn_parallel.ladder.collectives import ring_all_reduce
from learn_parallel.ladder.distributed import DistributedDataParallel

IN, HIDDEN, OUT = 8, 16, 4
LR = 0.1


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> nn.Module:
    """A three-layer MLP, small enough to train in many processes on two CPU cores."""
    torch.manual_seed(seed)
    layers = [nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(HIDDEN, OUT)).to(dtype)


def step_batches(
    rows: Sequence[int], step: int, seed: int = 0, dtype: torch.dtype = torch.float64
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Step ``step``'s data, cut into one (x, y) share per rank with ``rows[r]`` rows each."""
    generator = torch.Generator().manual_seed(1000 * seed + step)
    x = torch.randn(sum(rows), IN, generator=generator, dtype=dtype)
    y = torch.randn(sum(rows), OUT, generator=generator, dtype=dtype)
    return list(zip(x.split(list(rows)), y.split(list(rows))))


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in module.named_parameters()}


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu().clone() for n, p in module.named_parameters()}


def reference_training(
    rows: Sequence[int], steps: int = 3, seed: int = 0, per_rank_mean: bool = True
) -> dict[str, Any]:
    """One process, no DDP: the outputs, grads and params every rank should see per step.
    The loss: the mean of each rank's mean loss (as DDP), or without ``per_rank_mean`` the
    plain mean over every row of the step."""
    model = tiny_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    record: dict[str, list] = {"outputs": [], "grads": [], "params": []}
    for step in range(steps):
        shares = step_batches(rows, step, seed)
        outputs = [model(x) for x, _ in shares]
        if per_rank_mean:
            loss = sum(F.mse_loss(o, y) for o, (_, y) in zip(outputs, shares)) / len(shares)
        else:
            loss = F.mse_loss(torch.cat(outputs), torch.cat([y for _, y in shares]))
        loss.backward()
        record["outputs"].append([o.detach().clone() for o in outputs])
        record["grads"].append(_grads(model))
        optimizer.step()
        optimizer.zero_grad()
        record["params"].append(_snapshot(model))
    return record


def train_worker(
    rank: int,
    world: int,
    rows: Sequence[int],
    steps: int = 3,
    seed: int = 0,
    bucket_cap_mb: float = 0.001,
) -> dict[str, Any]:
    """Train ``steps`` steps with our DDP on this rank's share; return what it saw. The
    default bucket cap (about 1 KB) makes several buckets even for this tiny model."""
    device = rank_device(dist.get_backend(), rank)
    # Every rank seeds differently: the broadcast at wrap time must fix that.
    model = tiny_model(seed + rank).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    record: dict[str, Any] = {"outputs": [], "grads": [], "params": [], "buckets": len(ddp.buckets)}
    for step in range(steps):
        x, y = (t.to(device) for t in step_batches(rows, step, seed)[rank])
        out = ddp(x)
        F.mse_loss(out, y).backward()
        record["outputs"].append(out.detach().cpu().clone())
        record["grads"].append(_grads(model))
        optimizer.step()
        optimizer.zero_grad()
        record["params"].append(_snapshot(model))
    return record


def no_sync_worker(rank: int, world: int, micro: int = 3, rows: int = 4, seed: int = 0) -> dict:
    """``micro`` micro-batches per rank, the first ``micro - 1`` under ``no_sync``, one step:
    the gradients after the first (this rank's own: no communication), and the gradients and
    parameters after the step."""
    device = rank_device(dist.get_backend(), rank)
    model = tiny_model(seed).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    shares = step_batches([rows] * (world * micro), 0, seed)
    mine = [shares[rank * micro + k] for k in range(micro)]
    result: dict[str, Any] = {}
    for k, (x, y) in enumerate(mine):
        x, y = x.to(device), y.to(device)
        with ddp.no_sync() if k < micro - 1 else nullcontext():
            (F.mse_loss(ddp(x), y) / micro).backward()
        if k == 0 and micro > 1:
            result["first_local_grads"] = _grads(model)
    result["grads"] = _grads(model)
    optimizer.step()
    result["params"] = _snapshot(model)
    return result


def ring_worker(rank: int, world: int, numel: int = 10, seed: int = 0) -> dict[str, Any]:
    """Our ring all-reduce and ``dist.all_reduce`` on the same per-rank tensors."""
    device = rank_device(dist.get_backend(), rank)
    generator = torch.Generator().manual_seed(seed + rank)
    mine = torch.randn(numel, dtype=torch.float64, generator=generator).to(device)
    ours, theirs = mine.clone(), mine.clone()
    ring_all_reduce(ours)
    dist.all_reduce(theirs)
    return {"input": mine.cpu(), "ring": ours.cpu(), "all_reduce": theirs.cpu()}


def errors_worker(rank: int, world: int) -> dict[str, str]:
    """The messages of what our DDP refuses, raised the same way on every rank."""
    device = rank_device(dist.get_backend(), rank)
    messages: dict[str, str] = {}
    model = nn.Linear(4, 4).double()
    model.unused = nn.Linear(4, 4).double()  # registered but never called: it gets no gradient
    ddp = DistributedDataParallel(model.to(device))
    try:
        ddp(torch.randn(2, 4, dtype=torch.float64, device=device)).sum().backward()
        messages["unused"] = ""
    except RuntimeError as error:
        messages["unused"] = str(error)
    wrong = 1 - device.index if device.type == "cuda" else 0
    refused = {
        "device_ids": lambda: DistributedDataParallel(tiny_model().to(device), device_ids=[wrong]),
        "frozen": lambda: DistributedDataParallel(tiny_model().requires_grad_(False).to(device)),
    }
    if device.type == "cuda":  # NCCL cannot all-reduce a CPU module's gradients
        refused["cpu_module"] = lambda: DistributedDataParallel(tiny_model())
        other = torch.device("cuda", 1 - device.index)
        refused["other_gpu"] = lambda: DistributedDataParallel(tiny_model().to(other))
    for key, call in refused.items():
        try:
            call()
            messages[key] = ""
        except ValueError as error:
            messages[key] = str(error)
    dist.barrier()
    return messages


def takes_keyword(function: Any, name: str) -> bool:
    """Whether ``function`` has a parameter called ``name`` (torch's DDP takes no ``**kwargs``)."""
    return name in inspect.signature(function).parameters


# torch 2.13 deprecates ``broadcast_buffers`` for this keyword; torch 2.11 has no such parameter.
FORWARD_SYNC_BUFFERS = takes_keyword(TorchDDP.__init__, "forward_sync_buffers")


def buffers_worker(rank: int, world: int) -> dict[str, float]:
    """A buffer that holds each rank's number, read right after wrapping: ours with
    ``broadcast_buffers=False``, and torch's with ``broadcast_buffers=False`` (deprecated in
    2.13) and, only where this torch takes it (`FORWARD_SYNC_BUFFERS`), with
    ``forward_sync_buffers=False``, its new name for the forward broadcast."""
    device = rank_device(dist.get_backend(), rank)
    ids = [device.index] if device.type == "cuda" else None
    wraps = {
        "ours": lambda m: DistributedDataParallel(m, broadcast_buffers=False),
        "torch broadcast_buffers=False": lambda m: TorchDDP(
            m, device_ids=ids, broadcast_buffers=False
        ),
    }
    if FORWARD_SYNC_BUFFERS:
        wraps["torch forward_sync_buffers=False"] = lambda m: TorchDDP(
            m, device_ids=ids, forward_sync_buffers=False
        )
    seen = {}
    for name, wrap in wraps.items():
        model = nn.Linear(2, 2).double().to(device)
        model.register_buffer("mark", torch.tensor(float(rank), device=device))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # broadcast_buffers is deprecated
            wrap(model)
        seen[name] = model.mark.item()
    return seen


class Branch(nn.Module):
    """``used``, after ``branch`` where ``take_branch``: a rank without it leaves two unused."""

    def __init__(self, take_branch: bool) -> None:
        super().__init__()
        self.take_branch = take_branch
        self.used, self.branch = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(self.branch(x) if self.take_branch else x)


def teardown_worker(rank: int, world: int) -> dict[str, Any]:
    """Only rank 0 takes the branch. The others raise our `_finish` error, catch it and tear
    their group down, as `processes._entry` does before the error ends the process; every
    rank returns what its backward raised and how many seconds it took. Run it last: the
    group is gone afterwards."""
    device = rank_device(dist.get_backend(), rank)
    ddp = DistributedDataParallel(Branch(take_branch=rank == 0).double().to(device))
    x = torch.randn(2, 4, dtype=torch.float64, device=device)
    dist.barrier()
    started = time.perf_counter()
    try:
        ddp(x).sum().backward()
        return {"error": "", "seconds": time.perf_counter() - started}
    except RuntimeError as error:
        if rank != 0:
            dist.destroy_process_group()
        return {"error": str(error), "seconds": time.perf_counter() - started}


def suite_worker(rank: int, world: int, tasks: Sequence[tuple[str, dict]]) -> dict[str, Any]:
    """Several of the workers above in one process start (starting processes is slow)."""
    workers = {
        "train": train_worker,
        "no_sync": no_sync_worker,
        "ring": ring_worker,
        "errors": errors_worker,
        "buffers": buffers_worker,
        "teardown": teardown_worker,
    }
    return {
        f"{name}:{i}": workers[name](rank, world, **kwargs)
        for i, (name, kwargs) in enumerate(tasks)
    }
