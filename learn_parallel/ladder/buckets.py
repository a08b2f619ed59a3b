"""Gradient buckets for replicas that own their parameters: which travel together, and when.

Kept replicas (the ladder chapter) have leaf parameters of their own, so nothing in
autograd sums their gradients. `GradientBuckets` groups the parameters as DDP does
(`collectives.assign_buckets`, within one dtype) and counts each bucket's gradients
as backward accumulates them; once every replica has produced a bucket, it hands the
bucket on while backward still runs for earlier layers. `SumOntoSource` is what
`FastDataParallel` hands it to: the sum of the replicas' gradients in the original's
``.grad``. `ReplicatedStep` all-reduces instead.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import ExitStack

import torch

from learn_parallel.devices import Device
from learn_parallel.ladder.collectives import assign_buckets


# [buckets]
def plan_buckets(params: Sequence[torch.Tensor], cap_bytes: float) -> list[list[int]]:
    """Positions in ``params`` per bucket: `assign_buckets` within each dtype.

    A bucket becomes one flat tensor (one concatenation, one all-reduce), and a
    tensor holds one dtype, so parameters of different dtypes never share one.
    """
    by_dtype: dict[torch.dtype, list[int]] = {}
    for position, param in enumerate(params):
        by_dtype.setdefault(param.dtype, []).append(position)
    buckets = []
    for positions in by_dtype.values():
        sizes = [params[i].numel() * params[i].element_size() for i in positions]
        buckets += [[positions[k] for k in bucket] for bucket in assign_buckets(sizes, cap_bytes)]
    return buckets


class Bucket:
    """Parameter positions whose gradients travel together, and this backward's count."""

    def __init__(self, positions: list[int], replicas: int) -> None:
        self.positions = positions
        self.arrived = 0
        self.launched = False
        # Per replica, the stream its gradients were accumulated on (GPUs): whatever
        # reads them must wait for that stream, which is not always the caller's.
        self.streams: list[torch.cuda.Stream | None] = [None] * replicas


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
        self.buckets = [Bucket(p, len(replicas)) for p in plan_buckets(replicas[0], cap_bytes)]
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
            bucket.arrived, bucket.launched = 0, False
            bucket.streams = [None] * len(bucket.streams)

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
            ready = self._early and bucket.arrived == len(bucket.positions) * self._used
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
    side stream per device: a copy between two devices makes the current streams of
    both wait for each other, and on the compute streams that would hold up the
    source's backward until the copy is done.
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
