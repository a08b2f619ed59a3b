"""A minimal DistributedDataParallel: one process per device, gradients averaged by all-reduce.

DataParallel drives every device from one process and copies the parameters to them
at every step. DistributedDataParallel gives every device a process of its own, with
its own copy of the model and its own optimizer, talking through ``torch.distributed``:

1. at wrap time rank 0's parameters and buffers are broadcast, so every process
   starts from the same weights (and never copies them again);
2. each process runs forward and backward on its own share of the batch;
3. during backward, each complete group ("bucket") of gradients is all-reduced
   asynchronously, while autograd goes on with the earlier layers;
4. every process ends backward with the same averaged gradients, so the copies stay
   equal (the DDP chapter, ``book/distributed.ipynb``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from learn_parallel.ladder.buckets import Bucket, plan_buckets
from learn_parallel.ladder.collectives import broadcast_coalesced
from learn_parallel.phases import phase

DEFAULT_BUCKET_CAP_MB = 25.0  # the default of torch.nn.parallel.DistributedDataParallel


class DistributedDataParallel(nn.Module):
    """Data parallelism with one process per device, like torch's DistributedDataParallel.

    Call ``torch.distributed.init_process_group`` in every process first, move
    the module to this process's device, then wrap it. Each process feeds its
    own share of the batch; after ``loss.backward()`` every process holds the
    gradients averaged over all processes. Averaging per-process gradients
    means that with equal shares per process the result is the gradient of the
    global mean loss; with unequal shares it is the mean of the per-process
    mean losses (each process counts equally, not each sample).

    ``device_ids``: None, or ``[i]`` naming the one GPU the module is on.
    ``output_device``: accepted for torch's signature; outputs stay where the
    module computes them.
    ``bucket_cap_mb``: how many megabytes (2**20 bytes) of gradients go into one
    all-reduce. ``broadcast_buffers``: copy rank 0's buffers (BatchNorm running
    statistics) to every process at every forward. torch does so by default before the
    first forward and before each forward that follows one run with gradients outside
    ``no_sync`` (its flag ``require_forward_param_sync``); the distributed chapter shows
    the difference. Wrapping broadcasts rank 0's buffers whatever this flag says, where
    torch's ``broadcast_buffers=False`` leaves them out of that first broadcast too.
    Not supported: modules spread over several devices, and parameters that
    get no gradient in a step (torch's ``find_unused_parameters``).
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[int | torch.device] | None = None,
        output_device: int | torch.device | None = None,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
    ) -> None:
        super().__init__()
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "DistributedDataParallel needs a process group, and none is initialised: "
                "call torch.distributed.init_process_group(backend, rank=..., world_size=...) "
                "in every process before wrapping the model."
            )
        self.module = module
        self.group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.broadcast_buffers = broadcast_buffers
        self.device = _check_device(module, device_ids, output_device)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError(
                "DistributedDataParallel has nothing to do: the module has no parameter "
                "that requires a gradient."
            )
        self.params = [p for _, p in named]
        self.param_names = {p: n for n, p in named}

        # 1. Same starting point everywhere: rank 0's parameters and buffers.
        with torch.no_grad():
            broadcast_coalesced([*module.parameters(), *module.buffers()], 0, process_group)

        # 2. Buckets, last parameter first (roughly the order backward produces them).
        plan = plan_buckets(self.params, int(bucket_cap_mb * 2**20))
        self.buckets = [Bucket(i, positions) for i, positions in enumerate(plan)]
        self.bucket_of = {self.params[i]: b for b in self.buckets for i in b.positions}

        # 3. One hook per parameter, called by autograd once its .grad is complete.
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._gradient_ready)

        self.require_sync = True  # switched off by no_sync()
        self._sync_this_backward = True
        self._reset()  # per-backward state: ready counts, the next bucket to launch
        # GPUs: all-reduces run on a side stream, so backward's kernels never wait for them.
        self._comm_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        self._reset()
        self._sync_this_backward = self.require_sync and torch.is_grad_enabled()
        if self.broadcast_buffers and self.world_size > 1:
            buffers = list(self.module.buffers())
            if buffers:
                with torch.no_grad():
                    broadcast_coalesced(buffers, 0, self.group)
        with phase("forward", self.device):
            return self.module(*inputs, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """A forward run inside this block makes its backward only accumulate locally.

        Where the forward ran decides: the backward of the first forward run outside it
        all-reduces everything accumulated, so k batches cost each bucket one all-reduce, not k.
        """
        previous, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = previous

    # -- during backward -------------------------------------------------------
    def _gradient_ready(self, param: nn.Parameter) -> None:
        """Autograd calls this as soon as ``param.grad`` holds this backward's gradient."""
        if not self._sync_this_backward:
            return
        if not self._finish_queued:
            # Run `_finish` once autograd has finished the whole backward pass.
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            self._finish_queued = True
        self._seen.add(param)
        bucket = self.bucket_of[param]
        bucket.arrived += 1
        # Launch every complete bucket, in bucket order: all ranks must issue
        # their collectives in the same order, or they would pair up wrongly.
        while self._next_bucket < len(self.buckets) and self.buckets[self._next_bucket].complete():
            self._launch(self.buckets[self._next_bucket])
            self._next_bucket += 1

    def _launch(self, bucket: Bucket) -> None:
        """Start the all-reduce of one bucket without waiting for it."""
        # Dividing first keeps the sum in range; the sum of the quotients is the mean.
        grads = [self.params[i].grad.reshape(-1) for i in bucket.positions]
        bucket.flat = torch.cat(grads).div_(self.world_size)
        with self._on_comm_stream():
            # A phase mark (a no-op unless a recorder listens) that stays open until
            # the all-reduce is done: at once on GPUs (on the side stream), at the
            # end of backward on the CPU, where this DDP waits for gloo in `_finish`.
            bucket.timing = phase(f"all-reduce {bucket.index}", self.device)
            bucket.timing.__enter__()
            bucket.work = dist.all_reduce(bucket.flat, group=self.group, async_op=True)
            if self._comm_stream is not None:
                self._wait(bucket)  # NCCL: the side stream waits, the host goes on

    def _finish(self) -> None:
        """End of backward: wait for every all-reduce and write the averages into ``.grad``."""
        missing = [b for b in self.buckets[self._next_bucket :] if not b.complete()]
        if missing:
            params = [self.params[i] for b in missing for i in b.positions]
            no_grad = [self.param_names[p] for p in params if p not in self._seen]
            self._reset()
            raise RuntimeError(
                "DistributedDataParallel: these parameters got no gradient in this backward "
                f"pass: {', '.join(no_grad)}. Their bucket cannot be all-reduced, and the other "
                "processes would wait for it forever. Use every parameter in forward, or "
                "freeze the unused ones with requires_grad_(False) before wrapping the model "
                "(torch.nn.parallel.DistributedDataParallel can also search for them with "
                "find_unused_parameters=True)."
            )
        with self._on_comm_stream():
            for bucket in self.buckets:
                if bucket.work is not None:
                    self._wait(bucket)  # gloo: blocks until that bucket is summed
        if self._comm_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._comm_stream)
        with phase("unflatten", self.device):
            for bucket in self.buckets:
                grads = [self.params[i].grad for i in bucket.positions]
                pieces = bucket.flat.split([g.numel() for g in grads])
                for grad, piece in zip(grads, pieces):
                    grad.copy_(piece.view_as(grad))
        self._reset()

    def _wait(self, bucket: Bucket) -> None:
        bucket.work.wait()
        bucket.timing.__exit__(None, None, None)
        bucket.work = None  # waited for

    def _reset(self) -> None:
        for bucket in self.buckets:
            bucket.reset()
        self._next_bucket = 0
        self._finish_queued = False
        self._seen: set[nn.Parameter] = set()

    def _on_comm_stream(self) -> Any:
        if self._comm_stream is None:
            return nullcontext()
        self._comm_stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self._comm_stream)


def _check_device(
    module: nn.Module,
    device_ids: Sequence[int | torch.device] | None,
    output_device: int | torch.device | None,
) -> torch.device:
    """The one device this process's module lives on, or a clear error."""
    devices = {t.device for t in [*module.parameters(), *module.buffers()]}
    if len(devices) != 1:
        where = ", ".join(sorted(map(str, devices))) or "nowhere (no parameters)"
        raise ValueError(
            f"DistributedDataParallel drives one device per process, but the module's "
            f"parameters and buffers are on: {where}. Move the whole module to this "
            f"process's device first, e.g. module.to(f'cuda:{{rank}}')."
        )
    device = devices.pop()
    if device.type == "cpu":
        if device_ids is not None or output_device is not None:
            raise ValueError(
                "device_ids and output_device must be None for a module on the CPU; "
                f"got device_ids={device_ids!r}, output_device={output_device!r}."
            )
        if dist.get_backend() == "nccl":
            raise ValueError(
                "The process group uses NCCL, which moves only CUDA tensors, but the module is "
                "on the CPU: move it to this process's GPU, or use the gloo backend."
            )
        return device
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        raise ValueError(
            f"The module is on {device}, but this process's current GPU is "
            f"cuda:{torch.cuda.current_device()}, where NCCL runs its collectives. Give each "
            "process its own GPU: torch.cuda.set_device(rank), then module.to(rank)."
        )
    if device_ids is not None:
        wanted = [torch.device(device.type, d) if isinstance(d, int) else d for d in device_ids]
        if len(wanted) != 1 or torch.device(wanted[0]) != device:
            raise ValueError(
                f"device_ids must name the one device the module is on ([{device.index}]), "
                f"got {list(device_ids)!r}: one process drives one device. Move the module "
                f"with module.to(device) or pass device_ids=[{device.index}]."
            )
    return device
