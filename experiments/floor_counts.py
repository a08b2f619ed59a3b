"""Bytes and FLOPs of every phase the chapters time, counted from tensors on the meta device.

Read by `experiments.floors`, which records them in ``floors.json`` beside the bandwidths and
throughputs they are divided by. Nothing here is timed: a problem (a model and its batch)
is built on the ``meta`` device, where tensors have shapes and no data, and split the
way DataParallel splits it. Bytes are ``numel() * element_size()`` of the tensors a phase
moves; FLOPs are what ``torch.utils.flop_counter.FlopCounterMode`` counts in one replica's
forward and backward (in these models, the matrix products and the convolutions).
Counting happens where the run is recorded because ResNet-18 needs torchvision, which a
reader's CPU install lacks, and so the counts carry the same commit and torch as the timings.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from learn_parallel.lab.measurement import mlp
from learn_parallel.lab.workloads import Workload, build_model, standard_workloads

META = torch.device("meta")
Problem = tuple[nn.Module, torch.Tensor]  # a model and the batch DataParallel splits


def nbytes(tensors: Any) -> int:
    """Bytes of a tensor, or of every tensor in a list."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(nbytes(t) for t in tensors)


def by_operator_class(counter: FlopCounterMode) -> dict[str, int]:
    """The FLOPs counted, split into convolutions and matrix products (each has its peak)."""
    classes = {"conv": 0, "matmul": 0}
    for op, flops in counter.get_flop_counts()["Global"].items():
        classes["conv" if "conv" in str(op) else "matmul"] += int(flops)
    return classes


def replica_flops(model: nn.Module, piece: torch.Tensor) -> dict[str, dict[str, int]]:
    """FLOPs of one replica's forward on ``piece`` and of its backward (every parameter's
    gradient; none for the input, which needs none in DataParallel), per operator class."""
    if not any(p.requires_grad for p in model.parameters()):
        return {"forward": {"conv": 0, "matmul": 0}, "backward": {"conv": 0, "matmul": 0}}
    with FlopCounterMode(display=False) as forward:
        output = model(piece)
    with FlopCounterMode(display=False) as backward:
        output.backward(torch.ones_like(output))
    model.zero_grad(set_to_none=True)
    return {"forward": by_operator_class(forward), "backward": by_operator_class(backward)}


def data_parallel_counts(problem: Problem, n: int) -> dict[str, Any]:
    """The tensors a DataParallel step on ``n`` devices moves, in bytes: each piece of the batch
    and each replica's output (index i: device i's), the module's parameters and buffers, its
    gradients; and one replica's FLOPs. `learn_parallel.lab.floors.moved` says which phase
    moves which."""
    model, x = problem
    pieces = x.chunk(n)  # what Scatter does with sizes=None
    with torch.no_grad():
        outputs = [model(p) for p in pieces]
    return {
        "devices": len(pieces),
        "rows": [p.shape[0] for p in pieces],
        "pieces": [nbytes(p) for p in pieces],
        "outputs": [nbytes(o) for o in outputs],
        "parameters": nbytes(list(model.parameters())),
        "buffers": nbytes(list(model.buffers())),
        "gradients": nbytes([p for p in model.parameters() if p.requires_grad]),
        "flops": replica_flops(model, pieces[0]),  # the largest piece
    }


def workload_problem(workload: Workload) -> Problem:
    """The benchmark's model and batch (`workloads.make_batch`'s shapes) on the meta device;
    the targets stay on the first device in a DataParallel step, so they move nowhere."""
    model = build_model(workload).to(META).train()
    size = workload.image_size
    shape = (workload.width,) if workload.kind == "mlp" else (3, size, size)
    return model, torch.empty(workload.batch, *shape, device=META)


# The chapters' own recorded measurements, as `learn_parallel.lab.measure` builds them; each
# quotes the line of its function it mirrors (tests/experiments/test_floors.py checks that
# the line is still there, so a change of shapes there cannot leave these counts behind).
# replicate_copy's model comes from the measurement's own `mlp`, here on the meta device.
MIRRORS = {
    "training": (
        "training_timeline",
        "nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512))",
    ),
    "replicate_copy": ("replicate_copy", "list(mlp(width, 4, devs[0].torch_device).parameters())"),
    "gather_targets": ("gather_targets", "torch.randn(rows, 1024, device=devs[0].torch_device)"),
}


def chapter_problem(key: str) -> Problem:
    """``training`` (the data_parallel chapter's step), ``replicate_copy`` and
    ``gather_targets`` (their chapters' copies) on the meta device."""
    if key == "training":
        net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).to(META)
        return net, torch.empty(4096, 512, device=META)
    if key == "replicate_copy":  # only its parameters move (it has no buffers); the batch is any
        return mlp(1024, 4, META), torch.empty(4096, 1024, device=META)
    if key == "gather_targets":  # gathers the pieces of a 4096 x 1024 batch, as outputs
        return nn.Identity(), torch.empty(4096, 1024, device=META)
    raise KeyError(f"No chapter problem {key!r}; known: {sorted(MIRRORS)}.")


def device_counts(gpus: int) -> list[int]:
    """1, 2, 4, 8 up to ``gpus``, and ``gpus`` itself: the counts the recordings ran at."""
    return sorted({n for n in (1, 2, 4, 8) if n <= gpus} | {gpus})


def all_counts(gpus: int) -> dict[str, dict[str, Any]]:
    """``{problem: {"workload": ..., "by_devices": {n: counts}}}`` for the benchmark's two
    workloads at GPU size (``mlp``, ``conv``) and the chapters' problems."""
    found: dict[str, dict[str, Any]] = {}
    for key, workload in standard_workloads("gpu").items():
        problem = workload_problem(workload)
        found[key] = {
            "workload": workload.to_dict(),
            "by_devices": {str(n): data_parallel_counts(problem, n) for n in device_counts(gpus)},
        }
    for key in MIRRORS:
        problem = chapter_problem(key)
        found[key] = {
            "workload": None,
            "by_devices": {str(n): data_parallel_counts(problem, n) for n in device_counts(gpus)},
        }
    return found
