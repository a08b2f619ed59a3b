"""FastDataParallel's gradient half: buckets summed onto the source device during backward.

Each replica has its own leaf parameters, so nothing in autograd sums their
gradients: a hook per replica parameter counts the gradients of each bucket as
they arrive and, once every replica has produced a bucket, sums it into the
original's ``.grad`` while backward still runs for earlier layers.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch


class GradientBucket:
    """Parameter positions whose gradients are summed together, and this backward's count."""

    def __init__(self, positions: list[int], replicas: int) -> None:
        self.positions = positions
        self.arrived = 0
        self.reduced = False
        # Per replica, the stream its gradients were accumulated on (GPUs): the
        # reduce must wait for that stream, which is not always the caller's.
        self.streams: list[torch.cuda.Stream | None] = [None] * replicas


class BucketedReduce:
    """The bucket methods of `FastDataParallel` (a mixin: it reads the wrapper's state)."""

    # [buckets]
    def _build_buckets(self, bucket_mb: float) -> None:
        """Group trainable parameters, last first, into buckets of about ``bucket_mb`` per dtype."""
        limit = bucket_mb * 2**20
        self._buckets: list[GradientBucket] = []
        open_bucket: dict[torch.dtype, tuple[list[int], int]] = {}
        for i in reversed(range(len(self._params))):
            p = self._params[i]
            if not p.requires_grad:
                continue
            positions, size = open_bucket.get(p.dtype, ([], 0))
            positions.append(i)
            size += p.numel() * p.element_size()
            if size >= limit:
                self._buckets.append(GradientBucket(positions, len(self.devices)))
                positions, size = [], 0
            open_bucket[p.dtype] = (positions, size)
        self._buckets += [
            GradientBucket(positions, len(self.devices))
            for positions, _ in open_bucket.values()
            if positions
        ]
        self._bucket_of = {i: b for b in self._buckets for i in b.positions}
        for k, params in enumerate(self._replica_params):
            for i, p in enumerate(params):
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._hook(k, i))

    def _hook(self, replica: int, position: int):
        def on_gradient(param: torch.Tensor) -> None:
            self._gradient_ready(replica, position)

        return on_gradient

    def _gradient_ready(self, replica: int, position: int) -> None:
        """Runs in an autograd thread each time one replica's gradient is accumulated."""
        bucket = self._bucket_of.get(position)
        # The engine runs this hook on the stream the gradient was accumulated on:
        # the caller's stream usually, the warm-up stream of make_graphed_callables
        # for captured replicas (their AccumulateGrad nodes were created there).
        stream = None
        if bucket is not None and self._side_streams is not None:
            stream = torch.cuda.current_stream(self.devices[replica].index)
        with self._lock:
            if not self._callback_queued:
                self._callback_queued = True
                # Run _finish_backward once backward is over (as DDP does).
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            if bucket is None:
                return
            bucket.arrived += 1
            bucket.streams[replica] = stream
            # Each leaf accumulates at most once per backward, so a full count
            # means every replica has this bucket's final gradients.
            ready = bucket.arrived == len(bucket.positions) * self._used and self.overlap_reduce
            if ready:
                bucket.reduced = True
                self.overlapped_reductions += 1  # buckets reduced inside backward, ever
        if ready:
            self._reduce(bucket, self._side_streams)

    def _finish_backward(self) -> None:
        with self._lock:
            self._callback_queued = False
            pending = [b for b in self._buckets if not b.reduced]
            for b in self._buckets:
                b.arrived, b.reduced = 0, False
                b.streams = [None] * len(self.devices)
        for bucket in pending:
            self._reduce(bucket)
        if self._side_streams is not None:
            # The optimizer reads the sums on the caller's streams: wait for the side streams.
            for caller, side in zip(self._caller_streams, self._side_streams):
                caller.wait_stream(side)
        for params in self._replica_params:
            for p in params:
                p.grad = None

    def _reset_backward_state(self) -> None:
        """Forget a backward that raised before its end (its callback never ran)."""
        with self._lock:
            self._callback_queued = False
            for b in self._buckets:
                b.arrived, b.reduced = 0, False
                b.streams = [None] * len(self.devices)
        for params in self._replica_params:
            for p in params:
                p.grad = None

    def _reduce(self, bucket: GradientBucket, side_streams: list | None = None) -> None:
        """Sum one bucket's gradients over the replicas into the original's ``.grad``.

        With ``side_streams`` (GPUs, during backward) the work runs on one side
        stream per device. Each first waits for the caller's stream of its
        device (the original's ``.grad`` may have been written there) and for
        the stream the bucket's gradients were accumulated on; a cross-device
        copy synchronises the current streams of both devices, and on the
        compute streams that would stall the source's backward until the copy
        is done.
        """
        if side_streams is None:
            self._sum_into_originals(bucket, None)
            return
        with ExitStack() as streams:
            for k, side in enumerate(side_streams[: self._used]):
                caller = self._caller_streams[k]
                side.wait_stream(caller)
                accumulated = bucket.streams[k]
                if accumulated is not None and accumulated != caller:
                    side.wait_stream(accumulated)
                streams.enter_context(torch.cuda.stream(side))
            self._sum_into_originals(bucket, side_streams)

    def _sum_into_originals(self, bucket: GradientBucket, side_streams: list | None) -> None:
        replicas = self._replica_params[: self._used]
        live = [i for i in bucket.positions if any(r[i].grad is not None for r in replicas)]
        if not live:
            return
        flats = []
        for k, r in enumerate(replicas):
            grads = [r[i].grad if r[i].grad is not None else torch.zeros_like(r[i]) for i in live]
            if side_streams is not None:
                for g in grads:  # read on a side stream: keep the memory until it is done
                    g.record_stream(side_streams[k])
            if any(g.requires_grad for g in grads):
                raise RuntimeError(
                    "FastDataParallel does not support double backward (create_graph=True): "
                    "its gradient reduction is not differentiable. Use DataParallel."
                )
            flats.append(torch.cat([g.reshape(-1) for g in grads]))
        source = self.src_device.torch_device
        total = flats[0]
        for flat in flats[1:]:
            total.add_(flat.to(source, non_blocking=True))
        if side_streams is not None:  # made on a side stream, used on the caller's stream
            total.record_stream(self._caller_streams[0])
        offset = 0
        for i in live:
            p = self._params[i]
            view = total[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
            if p.grad is None:
                p.grad = view
            else:
                p.grad.add_(view)

    # [buckets]
