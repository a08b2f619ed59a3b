"""FastDataParallel: DataParallel's interface with replicas kept across steps.

Three rungs of the ladder chapter, each a part of its own: `KeptReplicas` (built
once, refreshed in place every step), `GradientBuckets` with `SumOntoSource` (each
bucket's gradients summed onto the source device as soon as every replica has
them, while backward goes on) and `ReplicaGraphs` (each replica's forward and
backward replayed from CUDA graphs). The chapter lists what each rung requires.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import DeviceLike
from learn_parallel.ladder.buckets import GradientBuckets, SumOntoSource
from learn_parallel.ladder.graphs import ReplicaGraphs
from learn_parallel.ladder.kept_replicas import KeptReplicas, check_keepable
from learn_parallel.phases import phase
from learn_parallel.replicate import check_on_source_device


class FastDataParallel(DataParallel):
    """DataParallel with kept replicas, overlapped gradient sums and optional CUDA graphs.

    DataParallel's constructor (``module``, ``device_ids``, ``output_device``, ``dim``)
    and its scatter, parallel_apply and gather steps; its own forward, which refreshes
    kept replicas instead of building new ones. The rung switches: ``overlap_reduce`` (buckets of
    about ``bucket_mb`` summed during backward; off: one sum per dtype after backward)
    and ``cuda_graphs`` (GPUs only). Gradients reach the original through
    ``.backward()`` only, as with DDP, and not twice (double backward is refused); one
    backward per forward (the next forward refreshes the replicas in place, under what
    backward saved); forward and backward on the same CUDA streams; the module's tensors
    not replaced after wrapping (checked every step). BatchNorm statistics follow
    replica 0, as in DataParallel.
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
        *,
        overlap_reduce: bool = True,
        cuda_graphs: bool = False,
        bucket_mb: float = 25.0,
    ) -> None:
        super().__init__(module, device_ids, output_device, dim)
        check_keepable(module, self.src_device, cuda_graphs, "FastDataParallel")
        self.overlap_reduce = overlap_reduce
        self.kept = KeptReplicas(module, self.devices)
        trainable = [i for i, p in enumerate(self.kept.params) if p.requires_grad]
        replicas = [[params[i] for i in trainable] for params in self.kept.replica_params]
        originals = [self.kept.params[i] for i in trainable]
        # On GPUs, buckets summed during backward run on side streams (see SumOntoSource).
        on_side = overlap_reduce and not self.src_device.is_simulated
        self.sums = SumOntoSource(originals, replicas, self.devices, side_streams=on_side)
        cap = bucket_mb * 2**20 if overlap_reduce else math.inf
        self.buckets = GradientBuckets(
            replicas, cap, on_ready=self.sums.during_backward, on_first=self._queue_finish
        )
        self.graphs = ReplicaGraphs(self.kept, self.devices) if cuda_graphs else None

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        self.kept.check_unchanged()
        check_on_source_device(self.module, self.src_device)
        if not self.src_device.is_simulated:
            # The worker threads adopt these streams; the sums order themselves after them.
            self.sums.callers = [torch.cuda.current_stream(d.index) for d in self.devices]
        with phase("scatter"):
            inputs, kwargs = self.scatter(inputs, kwargs, self.devices)
        if not inputs and not kwargs:
            inputs, kwargs = ((),), ({},)
        if len(self.devices) == 1:
            with phase("forward", self.src_device):
                return self.module(*inputs[0], **kwargs[0])
        used = len(inputs)  # chunk can give fewer pieces than devices
        training = torch.is_grad_enabled()
        if training:
            self.sums.used = used
            self.buckets.arm(used, early=self.overlap_reduce)
            self._clear_replica_grads()
        if self.graphs is not None and training and self.module.training:
            # Before the refresh: capturing runs warm-up steps that touch the buffers.
            self.graphs.ensure_captured(inputs, kwargs)
        with phase("replicate"):
            self.kept.refresh(used)
        outputs = self.parallel_apply(self.kept.replicas[:used], inputs, kwargs)
        self.kept.copy_back_buffers()
        with phase("gather"):
            return self.gather(outputs, self.output_device)

    def _queue_finish(self) -> None:
        # Called from inside backward, at its first gradient: run _finish once it is over,
        # as DDP does.
        torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    def _finish(self) -> None:
        """Sum the buckets backward did not complete (all, without overlap_reduce)."""
        for bucket in self.buckets.finish():
            self.sums.sum(bucket)
        self.sums.after_backward()
        self._clear_replica_grads()

    def _clear_replica_grads(self) -> None:
        for params in self.kept.replica_params:
            for p in params:
                p.grad = None

    def train(self, mode: bool = True) -> FastDataParallel:
        super().train(mode)
        for replica in self.kept.replicas:
            replica.train(mode)
        return self

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, overlap_reduce={self.overlap_reduce}, "
            f"cuda_graphs={self.graphs is not None}, buckets={len(self.buckets.buckets)}"
        )
