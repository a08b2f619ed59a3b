"""Gradient buckets: which gradients travel together, and when a bucket is complete.

`plan_buckets` groups parameters as DDP does and `Bucket` holds one group's progress
in a backward; the minimal DDP (the distributed chapter), `FastDataParallel` and
`ReplicatedStep` (the ladder chapter) all use them. Kept replicas have leaf parameters
of their own, so nothing in autograd sums their gradients: `GradientBuckets` counts
each bucket's gradients as backward accumulates them and, once every replica has
produced a bucket, hands it on while backward still runs for earlier layers.
`SumOntoSource` is what `FastDataParallel` hands it to: the sum of the replicas'
gradients in the original's ``.grad``. `ReplicatedStep` all-reduces instead.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from learn_parallel.devices import Device


def plan_buckets(params: Sequence[torch.Tensor], cap_bytes: float) -> list[list[int]]:
    """Positions in ``params`` per bucket, filled from the last parameter to the first.

    Backward produces gradients roughly in the reverse order of the forward, so the
    first bucket is complete early in backward. A bucket is closed when the next
    parameter would take it past ``cap_bytes``; a parameter larger than the cap gets
    a bucket of its own. A bucket becomes one flat tensor, and a tensor holds one
    dtype, so each dtype fills buckets of its own. Buckets are listed as they close.
    """
    buckets: list[list[int]] = []
    filling: dict[torch.dtype, list[int]] = {}  # per dtype, the open bucket
    filled: dict[torch.dtype, int] = {}  # and its bytes
    for position in reversed(range(len(params))):
        dtype, size = params[position].dtype, params[position].nbytes
        if dtype in filling and filled[dtype] + size > cap_bytes:
            buckets.append(filling.pop(dtype))
        if dtype not in filling:
            filling[dtype], filled[dtype] = [], 0
        filling[dtype].append(position)
        filled[dtype] += size
    return buckets + list(filling.values())


# [buckets]
@dataclass(eq=False)
class Bucket:
    """Parameters whose gradients travel together, and what became of them in this backward.

    ``positions`` index the engine's parameter list (the same in every replica).
    ``arrived`` counts gradients as autograd accumulates them; ``launched``: handed on.
    ``streams``: per replica, the stream its gradients were accumulated on (GPUs), which
    whatever reads them must wait for. ``flat``, ``work`` and ``timing``: an all-reduce
    in flight (DistributedDataParallel), its gradients, handle and open phase mark.
    """

    index: int
    positions: list[int]
    arrived: int = 0
    launched: bool = False
    streams: list[torch.cuda.Stream | None] = field(default_factory=list)
    flat: torch.Tensor | None = None
    work: Any = None
    timing: Any = None

    def complete(self, replicas: int = 1) -> bool:
        """Whether every gradient of the bucket arrived, from each of ``replicas``."""
        return self.arrived == len(self.positions) * replicas

    def reset(self) -> None:
        """Forget this backward: nothing arrived, nothing launched or in flight."""
        self.arrived, self.launched = 0, False
        self.streams = [None] * len(self.streams)
        self.flat = self.work = self.timing = None


class GradientBuckets:
    """Buckets over the replicas' trainable parameters (the same order in every replica).

    A hook on every replica parameter counts its bucket's gradients as autograd
    accumulates them. Each leaf accumulates at most once per backward, so once a
    bucket has counted all of its gradients from every replica in use, it is complete:
    with ``early`` set, ``on_ready(bucket)`` runs there and then, in the autograd
    thread that completed it. `finish` returns the buckets left for after backward.
    The hooks hold this object weakly: a model that outlives it keeps no replicas alive.
    """

    def __init__(
        self,
        replicas: Sequence[Sequence[torch.Tensor]],
        cap_bytes: float,
        on_ready: Callable[[Bucket], None],
        on_first: Callable[[], None] | None = None,
    ) -> None:
        plan = plan_buckets(replicas[0], cap_bytes)
        self.buckets = [Bucket(i, p, streams=[None] * len(replicas)) for i, p in enumerate(plan)]
        self.on_ready, self.on_first = on_ready, on_first
        self.launched_in_backward = 0  # buckets handed on during backward, ever
        self._lock = threading.Lock()
        self._armed = self._early = self._seen = False
        self._used = len(replicas)
        bucket_of = {i: b for b in self.buckets for i in b.positions}
        owner = weakref.ref(self)
        for k, params in enumerate(replicas):
            for i, param in enumerate(params):
                param.register_post_accumulate_grad_hook(_counter(owner, bucket_of[i], k))

    def arm(self, used: int, early: bool) -> None:
        """Expect one backward through the first ``used`` replicas; ``early``: hand buckets
        on as they complete. Forgets a backward that raised before its end."""
        with self._lock:
            self._reset()
            self._armed, self._early, self._used = True, early, used

    def finish(self) -> list[Bucket]:
        """Backward is over: the buckets not handed on yet (every one without ``early``)."""
        with self._lock:
            pending = [b for b in self.buckets if not b.launched]
            self._reset()
        return pending

    def _reset(self) -> None:
        self._armed = self._seen = False
        for bucket in self.buckets:
            bucket.reset()

    def _arrived(self, bucket: Bucket, replica: int, param: torch.Tensor) -> None:
        if not self._armed:
            return  # the model used on its own, or a capture's Python: nothing to count
        stream = torch.cuda.current_stream(param.device) if param.is_cuda else None
        with self._lock:
            if not self._seen and self.on_first is not None:
                self.on_first()
            self._seen = True
            bucket.arrived += 1
            bucket.streams[replica] = stream
            ready = self._early and bucket.complete(self._used)
            if ready:
                bucket.launched = True
                self.launched_in_backward += 1
        if ready:
            self.on_ready(bucket)


def _counter(owner: weakref.ref, bucket: Bucket, replica: int) -> Callable[[torch.Tensor], None]:
    def hook(param: torch.Tensor) -> None:
        buckets = owner()
        if buckets is not None:
            buckets._arrived(bucket, replica, param)

    return hook


# [buckets]


class SumOntoSource:
    """A bucket's gradients summed over the replicas into the original parameters' ``.grad``.

    With ``side_streams`` (GPUs, buckets reduced during backward) the sum runs on one
    side stream per device: a copy between two devices runs on the sender's stream
    after it waits for the receiver's, and the receiver's then waits for the copy; on
    the compute streams that would hold up both devices' backward.
    """

    def __init__(
        self,
        originals: Sequence[torch.Tensor],
        replicas: Sequence[Sequence[torch.Tensor]],
        devices: Sequence[Device],
        side_streams: bool,
    ) -> None:
        self.originals, self.replicas, self.source = originals, replicas, devices[0]
        self.side = [torch.cuda.Stream(d.index) for d in devices] if side_streams else None
        self.callers: list[torch.cuda.Stream] = []  # the caller's streams, set every forward
        self.used = len(replicas)

    def during_backward(self, bucket: Bucket) -> None:
        if self.side is None:
            self.sum(bucket)
            return
        with ExitStack() as streams:
            for k, side in enumerate(self.side[: self.used]):
                # The original's .grad may have been written on the caller's stream, and
                # the bucket's gradients on the stream they were accumulated on.
                side.wait_stream(self.callers[k])
                accumulated = bucket.streams[k]
                if accumulated is not None and accumulated != self.callers[k]:
                    side.wait_stream(accumulated)
                streams.enter_context(torch.cuda.stream(side))
            self.sum(bucket, on_side=True)

    def after_backward(self) -> None:
        """The optimizer reads the sums on the caller's streams: wait for the side streams."""
        for caller, side in zip(self.callers, self.side or ()):
            caller.wait_stream(side)

    def sum(self, bucket: Bucket, on_side: bool = False) -> None:
        replicas = self.replicas[: self.used]
        live = [i for i in bucket.positions if any(r[i].grad is not None for r in replicas)]
        if not live:
            return
        flats = []
        for k, params in enumerate(replicas):
            grads = [
                params[i].grad if params[i].grad is not None else torch.zeros_like(params[i])
                for i in live
            ]
            if any(g.requires_grad for g in grads):
                raise RuntimeError(
                    "FastDataParallel does not support double backward (create_graph=True): "
                    "its gradient reduction is not differentiable. Use DataParallel."
                )
            if on_side:
                for g in grads:  # read on a side stream: keep the memory until it is done
                    g.record_stream(self.side[k])
            flats.append(torch.cat([g.reshape(-1) for g in grads]))
        total = flats[0]  # replica 0 sits on the source device
        for flat in flats[1:]:
            total.add_(flat.to(self.source.torch_device, non_blocking=True))
        if on_side:  # made on a side stream, used on the caller's stream
            total.record_stream(self.callers[0])
        offset = 0
        for i in live:
            original = self.originals[i]
            view = total[offset : offset + original.numel()].view(original.shape)
            offset += original.numel()
            if original.grad is None:
                original.grad = view
            else:
                original.grad.add_(view)
