"""The ladder's rungs: each one named change on top of the rung below it, and DDP's rows.

Each `Rung` says what it changes, what it requires and how to build it: a wrapper trained
with one optimizer (`wrapped`) or a `ReplicatedStep` (`replicated`: every device with its
own optimizer). The ladder chapter prints the table; `ladder.run` measures it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device
from learn_parallel.lab.reference_step import reference_step
from learn_parallel.lab.steps import make_step
from learn_parallel.lab.workloads import Workload, build_model, loss_function, make_batch
from learn_parallel.ladder import FastDataParallel, ReplicatedStep
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.variants import split_batch
from learn_parallel.variants.clone_replicate import CloneDataParallel

LR, SEED = 0.01, 0  # every rung and DDP: SGD at this rate, weights and batch from this seed
Step = Callable[[], Any]


class TorchWithOurWorkers(torch.nn.DataParallel):
    """torch's DataParallel with one thing changed: our parallel_apply (persistent workers)."""

    def parallel_apply(self, replicas: Sequence[nn.Module], inputs: Any, kwargs: Any) -> list:
        return parallel_apply(replicas, inputs, kwargs, self.device_ids[: len(replicas)])


class TorchReplicateDataParallel(DataParallel):
    """Our DataParallel with torch's own replicate: our forward around torch's replicate."""

    def replicate(self, module: nn.Module, device_ids: Sequence[Any]) -> list[nn.Module]:
        return torch.nn.parallel.replicate(module, device_ids, not torch.is_grad_enabled())


def wrapped(wrap: Callable[[nn.Module, list[int]], Any]) -> Callable:
    """A rung that wraps the model and trains it with one optimizer (``steps.train_step``)."""

    def make(workload: Workload, devices: list[Device]) -> tuple[Step, list[Device] | None]:
        step, forward, _ = make_step(workload, devices, wrap, LR, SEED)
        return step, getattr(forward, "devices", None)  # torch's DataParallel marks no phases

    return make


def replicated(**switches: bool) -> Callable:
    """A `ReplicatedStep` rung: every device keeps its replica and optimizer (SGD, ``LR``)."""

    def make(workload: Workload, devices: list[Device]) -> tuple[Step, list[Device]]:
        source = devices[0].torch_device
        model = build_model(workload, SEED).to(source)
        sgd, ids = partial(torch.optim.SGD, lr=LR), [d.index for d in devices]
        step = ReplicatedStep(model, sgd, partial(loss_function, workload), ids, **switches)
        x, y = make_batch(workload, workload.batch, source, SEED)
        batch: Any = (x, y)
        if switches.get("per_device_inputs", True):
            # Each device's slice is made on that device once, as each DDP rank makes its own.
            pieces = split_batch((x, y), len(devices))
            batch = [tuple(t.to(d.torch_device) for t in p) for p, d in zip(pieces, devices)]
        return (lambda: step(batch)), devices

    return make


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: what it changes, what it needs, how to build it, its base."""

    name: str
    change: str
    preconditions: str
    needs_cuda: bool
    make: Callable[[Workload, list[Device]], tuple[Step, list[Device] | None]]
    below: str | None = None  # the rung this one changes; verdicts compare the two
    # Measured at the end of every round: a CUDA-graph capture that fails can leave
    # CUDA's random number generator unusable for the rest of the process.
    measure_last: bool = False


ALL = "as above"
LADDER = (
    Rung(
        "torch_dp",
        "torch.nn.DataParallel: a fresh thread per replica every step, torch's replicate",
        "none",
        False,
        wrapped(torch.nn.DataParallel),
    ),
    Rung(
        "persistent_workers",
        "torch.nn.DataParallel with only its parallel_apply swapped for ours: one "
        "long-lived worker thread per device instead of a fresh thread per replica",
        "none",
        False,
        wrapped(TorchWithOurWorkers),
        "torch_dp",
    ),
    Rung(
        "our_forward",
        "learn_parallel.DataParallel's forward around the same replicate and workers: "
        "its source-device check, scatter and gather (and its phase marks, idle when "
        "nothing records); torch's replicate still rebuilds every module each step",
        "none",
        False,
        wrapped(TorchReplicateDataParallel),
        "persistent_workers",
    ),
    Rung(
        "lean_replicate",
        "our replicate: module shells filled without Module.__setattr__ "
        "(learn_parallel.DataParallel as the chapters teach it)",
        "none",
        False,
        wrapped(DataParallel),
        "our_forward",
    ),
    Rung(
        "kept_replicas",
        "replicas built once and kept; each step refreshes their flat "
        "parameter buffers with one multi-tensor copy and one copy per device; one gradient "
        "sum onto device 0 per dtype after backward",
        "parameters and buffers not replaced after wrapping; gradients through .backward() only",
        False,
        wrapped(partial(FastDataParallel, overlap_reduce=False)),
        "lean_replicate",
    ),
    Rung(
        "overlap_reduce",
        "gradients summed onto device 0 in ~25 MiB buckets as soon as every "
        "replica has produced them, while backward still runs",
        f"{ALL}, plus forward and backward on the same CUDA streams",
        False,
        wrapped(FastDataParallel),
        "kept_replicas",
    ),
    Rung(
        "cuda_graphs",
        "each replica's forward and backward captured once as two CUDA "
        "graphs and replayed, the rest of the step eager",
        f"{ALL}, plus the same input "
        "shapes every step, tensor inputs only, no data-dependent control flow, CUDA GPUs",
        True,
        wrapped(partial(FastDataParallel, cuda_graphs=True)),
        "overlap_reduce",
        True,
    ),
    Rung(
        "own_optimizers",
        "every device keeps its replica's weights and its own optimizer; "
        "after backward one in-process all-reduce per dtype sums the gradients on every "
        "device; only the buffers come from device 0 (broadcast before each forward; DDP's "
        "default does so before a forward that follows one run with gradients enabled "
        "outside no_sync)",
        "every trainable parameter gets a gradient every step (as DDP requires)",
        False,
        replicated(overlap=False, per_device_inputs=False),
        "kept_replicas",
    ),
    Rung(
        "all_reduce_in_backward",
        "gradients all-reduced in ~25 MiB buckets, each launched as "
        "soon as every device has produced it, while backward still runs",
        ALL,
        False,
        replicated(overlap=True, per_device_inputs=False),
        "own_optimizers",
    ),
    Rung(
        "per_device_inputs",
        "each device gets its own slice of the batch and computes its "
        "own loss: nothing scattered from device 0, nothing gathered to it",
        f"{ALL}, plus a batch split per device (PerDeviceCollate)",
        False,
        replicated(overlap=True, per_device_inputs=True),
        "all_reduce_in_backward",
    ),
    Rung(
        "step_graphs",
        "each device's step replayed from two CUDA graphs (zeroed gradients "
        "to backward; optimizer step) from one thread, the all-reduces eager between them",
        f"{ALL}, plus the same input shapes every step, a capturable optimizer, CUDA GPUs",
        True,
        replicated(overlap=True, per_device_inputs=True, cuda_graphs=True),
        "per_device_inputs",
        True,
    ),
)
REFERENCE = Rung(  # measured with the rungs, but no rung: what step_graphs is held against
    "one_thread_reference",
    "a reference, not a rung: step_graphs' GPU work with the fewest host calls, written out "
    "(learn_parallel/lab/reference_step.py): no checks, no copies, no fallback",
    "those of step_graphs, one parameter dtype, the batch it was captured with",
    True,
    lambda workload, devices: (reference_step(workload, devices, LR, SEED), None),
    "step_graphs",
    True,
)
MEASURED = (*LADDER, REFERENCE)  # the ladder set: every rung, then the reference
DDP_ROWS = {
    "ddp": ("torch's DistributedDataParallel: one process per device", None),
    "ddp_graphs": (
        "torch's DDP with its whole step (forward, backward with its bucket "
        "all-reduces, SGD step) captured in one CUDA graph per process",
        "ddp",
    ),
}

CLONE_SET = (
    Rung(
        "broadcast",
        "DataParallel: PyTorch's Python design, one Broadcast node for all parameters",
        "none",
        False,
        wrapped(DataParallel),
    ),
    Rung(
        "clone",
        "CloneDataParallel: libtorch's design, a deep copy per device "
        "and one ReduceAdd edge per parameter",
        "none",
        False,
        wrapped(CloneDataParallel),
        "broadcast",
    ),
)
