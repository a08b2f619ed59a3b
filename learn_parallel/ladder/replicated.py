"""ReplicatedStep: one process that trains the way DDP's processes do, one replica per device.

The ladder chapter's last rungs. Each device keeps a replica with its own weights and
its own optimizer; gradients are summed across the devices by an all-reduce from this
one process (`collectives.all_reduce_across`), bucket by bucket as backward produces
them; each device can read its own slice of the batch and keep its own loss; and each
device's whole step can be replayed from CUDA graphs. Nothing passes through device 0
but the buffers (BatchNorm statistics), which replica 0 broadcasts before each forward
as DDP's rank 0 does.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import wrapper_devices
from learn_parallel.devices import Device, DeviceLike
from learn_parallel.ladder.buckets import Bucket, GradientBuckets
from learn_parallel.ladder.collectives import all_reduce_across, broadcast_across
from learn_parallel.ladder.graphs import StepGraphs
from learn_parallel.ladder.kept_replicas import check_keepable, group_by_dtype, move_into_flat
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.phases import phase
from learn_parallel.scatter_gather import gather, scatter_kwargs
from learn_parallel.variants.clone_replicate import clone_to
from learn_parallel.variants.tuple_parallel import move_to_device

MakeOptimizer = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class _WithLoss:
    """A replica and the loss: what each device computes when it keeps its own loss."""

    def __init__(self, replica: nn.Module, loss_fn: Callable) -> None:
        self.replica, self.loss_fn = replica, loss_fn

    def __call__(self, inputs: Any, target: Any) -> torch.Tensor:
        return self.loss_fn(self.replica(inputs), target)


class ReplicatedStep:
    """``step(batch)``: one training step of ``module`` on every device; returns the loss.

    ``make_optimizer(params)`` builds one replica's optimizer; ``loss_fn(output, target)``.
    The rungs: ``overlap`` launches each bucket's all-reduce as soon as every device has
    its gradients (off: one all-reduce per dtype after backward); ``per_device_inputs``
    takes a batch already split per device, ``((x_0, y_0), (x_1, y_1), ...)`` as
    `PerDeviceCollate` makes it, each device computing its own loss (off: ``(x, y)`` is
    scattered from device 0, outputs gathered there for one loss); ``cuda_graphs``
    replays each device's step from CUDA graphs (needs ``per_device_inputs``; the graphs
    read the tensors of the step they captured, and a later step's other tensors are copied
    into them; the losses returned are the graphs' own, overwritten by the next step).
    ``broadcast_buffers`` (DDP's default; torch 2.13 names it ``forward_sync_buffers``):
    replica 0's buffers reach every replica before each forward (with graphs: at the end of
    each step, the same values). ``module`` is replica 0.
    """

    def __init__(
        self,
        module: nn.Module,
        make_optimizer: MakeOptimizer,
        loss_fn: Callable[[Any, Any], torch.Tensor],
        device_ids: Sequence[DeviceLike] | None = None,
        *,
        overlap: bool = True,
        per_device_inputs: bool = True,
        cuda_graphs: bool = False,
        broadcast_buffers: bool = True,
        bucket_mb: float = 25.0,
    ) -> None:
        self.devices: list[Device] = wrapper_devices(module, device_ids)
        source = self.devices[0]
        check_keepable(module, source, cuda_graphs, "ReplicatedStep")
        if cuda_graphs and not per_device_inputs:
            raise ValueError(
                "cuda_graphs=True captures each device's step on its own, loss included, so it "
                "needs per_device_inputs=True (one (input, target) piece per device)."
            )
        self.loss_fn, self.overlap = loss_fn, overlap
        self.per_device_inputs, self.broadcast_buffers = per_device_inputs, broadcast_buffers
        self.replicas = [module, *(clone_to(module, d) for d in self.devices[1:])]
        self.optimizers = [
            _own_optimizer(make_optimizer, r, k) for k, r in enumerate(self.replicas)
        ]
        trainable = [[p for p in r.parameters() if p.requires_grad] for r in self.replicas]
        if not trainable[0]:
            raise ValueError("ReplicatedStep has nothing to train: no parameter requires grad.")
        # This design replays backward as one graph with no hooks inside, so its all-reduces
        # wait for its end: one per dtype.
        cap = bucket_mb * 2**20 if overlap and not cuda_graphs else math.inf
        self.buckets = GradientBuckets(trainable, cap, on_ready=self._all_reduce)
        # Gradients live in one flat tensor per bucket and replica (each .grad a view),
        # so that a bucket's all-reduce is one call over one tensor per device.
        self._grads = {
            id(b): [_flat_grads([t[i] for i in b.positions]) for t in trainable]
            for b in self.buckets.buckets
        }
        self._zero = [[flats[k] for flats in self._grads.values()] for k in range(len(trainable))]
        buffers = [list(r.buffers()) for r in self.replicas]
        # Per dtype, one flat tensor per replica: one broadcast per dtype before each forward.
        self._buffers = [
            [move_into_flat([b[i] for i in positions], b[0].device) for b in buffers]
            for positions in group_by_dtype(buffers[0]).values()
        ]
        self._with_loss = [_WithLoss(r, loss_fn) for r in self.replicas]
        on_gpus = not source.is_simulated
        self._side = (
            [torch.cuda.Stream(d.index) for d in self.devices] if on_gpus and overlap else None
        )
        self._callers: list[torch.cuda.Stream] = []
        self._launch = threading.Lock()  # one all-reduce at a time, in one order on every device
        self.graphs = None
        if cuda_graphs:
            step = self._optimizer_step
            self.graphs = StepGraphs(self.devices, self._eager, self._device_backward, step)

    def __call__(self, batch: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.graphs is not None:
            return self.graphs(self._pieces(batch), self._all_reduce_rest, self._sync_buffers)
        with torch.enable_grad():
            return self._eager(batch)

    # [replicated-step]
    def _eager(self, batch: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Buffers from replica 0, forward and loss, backward with the all-reduces, optimizers."""
        on_gpus = not self.devices[0].is_simulated
        self._callers = (
            [torch.cuda.current_stream(d.index) for d in self.devices] if on_gpus else []
        )
        for flats in self._zero:
            torch._foreach_zero_(flats)
        self._sync_buffers()
        if self.per_device_inputs:
            with phase("scatter"):
                placed = [move_to_device(p, d) for p, d in zip(self._pieces(batch), self.devices)]
            losses = parallel_apply(self._with_loss, placed, None, self.devices)
            used, roots = len(self.devices), [loss / len(self.devices) for loss in losses]
        else:
            x, y = batch
            with phase("scatter"):
                inputs, _ = scatter_kwargs((x,), None, self.devices)
                y = move_to_device(y, self.devices[0])
            used = len(inputs)
            outputs = parallel_apply(self.replicas[:used], inputs, None, self.devices[:used])
            with phase("gather"):
                output = gather(outputs, self.devices[0])
            with phase("loss"):
                losses = roots = [self.loss_fn(output, y)]
        self.buckets.arm(used, early=self.overlap)
        with phase("backward"):
            torch.autograd.backward(roots)
        self._after_backward(used)
        with phase("optimizer"):
            for optimizer in self.optimizers:
                optimizer.step()
        detached = tuple(loss.detach() for loss in losses)
        return detached if self.per_device_inputs else detached[0]

    def _all_reduce(self, bucket: Bucket) -> None:
        """One bucket's gradients summed on every device (on GPUs, on side streams)."""
        flats = self._grads[id(bucket)]
        streams = self._side
        for k, stream in enumerate(streams or ()):
            stream.wait_stream(self._callers[k])  # last step's optimizer read these
            accumulated = bucket.streams[k]
            if accumulated is not None and accumulated != self._callers[k]:
                stream.wait_stream(accumulated)
        with self._launch:
            all_reduce_across(flats, streams)

    def _after_backward(self, used: int) -> None:
        incomplete = [b for b in self.buckets.buckets if b.arrived < len(b.positions) * used]
        pending = self.buckets.finish()
        if incomplete:
            raise RuntimeError(
                "A trainable parameter got no gradient in this backward, so its bucket cannot "
                "be all-reduced like the others (DDP refuses this too, unless "
                "find_unused_parameters=True). Use every parameter in forward, or freeze it "
                "with requires_grad_(False) before building the ReplicatedStep."
            )
        with phase("all-reduce"):
            for bucket in pending:
                self._all_reduce(bucket)
        for caller, side in zip(self._callers, self._side or ()):
            caller.wait_stream(side)  # the optimizers read the sums on the caller's streams

    # [replicated-step]

    def _all_reduce_rest(self) -> None:
        """Between the graphs: every bucket, one after another, on the current streams."""
        with self._launch, phase("all-reduce"):
            for flats in self._grads.values():
                all_reduce_across(flats)

    def _sync_buffers(self) -> None:
        if self.broadcast_buffers and self._buffers and len(self.devices) > 1:
            with phase("broadcast buffers"), torch.no_grad():
                for flats in self._buffers:
                    broadcast_across(flats, root=0)

    def _optimizer_step(self, k: int) -> None:
        self.optimizers[k].step()

    def _device_backward(self, k: int, piece: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """What device k's first graph holds: zeroed gradients, forward, loss, backward."""
        torch._foreach_zero_(self._zero[k])
        loss = self._with_loss[k](*piece)
        (loss / len(self.devices)).backward()
        return loss

    def _pieces(self, batch: Any) -> Sequence[Any]:
        n = len(self.devices)
        pairs = isinstance(batch, tuple | list) and len(batch) == n
        if not pairs or not all(isinstance(p, tuple | list) and len(p) == 2 for p in batch):
            got = type(batch).__name__
            if isinstance(batch, tuple | list):
                got = f"{len(batch)} items ({', '.join(type(p).__name__ for p in batch)})"
            raise ValueError(
                f"ReplicatedStep(per_device_inputs=True) takes one (input, target) piece per "
                f"device, {n} in all, but got {got}. Split the batch with "
                f"collate_fn=PerDeviceCollate({n}) in the DataLoader, or pass "
                f"per_device_inputs=False to scatter one (input, target) batch."
            )
        return batch

    def train(self, mode: bool = True) -> ReplicatedStep:
        """Switch every replica to training (or evaluation) mode."""
        for replica in self.replicas:
            replica.train(mode)
        return self

    def __repr__(self) -> str:
        simulated = " (simulated on the CPU)" if self.devices[0].is_simulated else ""
        return (
            f"ReplicatedStep(devices=[{', '.join(map(str, self.devices))}]{simulated}, "
            f"overlap={self.overlap}, per_device_inputs={self.per_device_inputs}, "
            f"cuda_graphs={self.graphs is not None}, broadcast_buffers={self.broadcast_buffers}, "
            f"buckets={len(self.buckets.buckets)})"
        )


def _own_optimizer(make: MakeOptimizer, replica: nn.Module, k: int) -> torch.optim.Optimizer:
    optimizer = make(replica.parameters())
    mine = {id(p) for p in replica.parameters()}
    if any(id(p) not in mine for group in optimizer.param_groups for p in group["params"]):
        raise ValueError(
            f"make_optimizer returned an optimizer over other parameters than replica {k}'s. "
            f"Build it over the parameters it is given: make_optimizer=lambda params: "
            f"torch.optim.SGD(params, lr=0.1)."
        )
    return optimizer


def _flat_grads(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """One zeroed flat tensor for ``params``' gradients; each ``.grad`` becomes a view of it.

    Autograd then accumulates into the views in place, so the flat tensor always holds
    the bucket's gradients (DDP's ``gradient_as_bucket_view=True`` does the same).
    """
    flat = torch.zeros(
        sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
    )
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat
