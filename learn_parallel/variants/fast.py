"""FastDataParallel: the opt-in fast path, built from the ladder's winning rungs.

`DataParallel` rebuilds its replicas every step and reduces every gradient
after backward; that is the readable path the chapters teach. This class keeps
the same single process and the same worker threads, but changes three things,
each with its own switch (the "ladder" chapter measures them one by one):

- **kept replicas** (always on): one replica per device is built once, its
  parameters and buffers living in one flat buffer per dtype. Each step
  refreshes them in place from the original with one multi-tensor copy and one
  copy per device, instead of rebuilding modules. The replicas have their own
  leaf parameters, as DDP's processes do; their gradients are summed into the
  original's ``.grad`` by hooks, not by a `Broadcast` node.
- ``overlap_reduce``: parameters are grouped into buckets in reverse order
  (roughly the order backward produces their gradients); a bucket's gradients
  are summed onto the source device as soon as every replica has produced
  them, while backward still runs for earlier layers. Off: one reduce per
  dtype after backward.
- ``cuda_graphs``: each replica's forward and backward are captured once with
  ``torch.cuda.make_graphed_callables`` and replayed, so a step launches one
  graph per device instead of hundreds of kernels from threads that share the
  GIL. GPUs only.

Preconditions (checked where cheap, stated where not):

- gradients reach the original through ``.backward()`` only (as with DDP:
  ``torch.autograd.grad`` with respect to the original's parameters sees only
  the replicas' leaves); double backward is refused;
- the module's parameters and buffers are not replaced after wrapping (checked
  every step); no optimizer step between a forward and its backward (the next
  forward refreshes the replicas in place, under the tensors backward saved);
- forward and backward run on the same CUDA streams (the caller's current
  ones, which the worker threads adopt);
- with ``cuda_graphs``: tensor positional inputs only, the same input shapes
  every step (checked: drop the last short batch), no data-dependent control
  flow, no module hooks, no CPU work in forward. Capture happens once, in the
  calling thread, one replica at a time, before any worker runs; a capture that
  fails leaves the wrapper refusing further steps with the original error
  (CUDA's random number generator of that device can stay in capture mode after
  a failed capture, so start a new process).

BatchNorm running statistics behave as in `DataParallel`: replica 0's updates
are copied back to the original after each forward.

The class is assembled from three files: this one (kept replicas, forward),
`fast_buckets` (the gradient reduction) and `fast_graphs` (the CUDA graphs).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device, DeviceLike, resolve_device_ids, to_device
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.phases import phase
from learn_parallel.replicate import check_on_source_device
from learn_parallel.scatter_gather import gather, scatter_kwargs
from learn_parallel.variants.clone_replicate import clone_to
from learn_parallel.variants.fast_buckets import BucketedReduce
from learn_parallel.variants.fast_graphs import GraphCapture


# [flat-layout]
def group_by_dtype(tensors: Sequence[torch.Tensor]) -> dict[torch.dtype, list[int]]:
    """Positions of ``tensors`` per dtype: one flat buffer can hold only one dtype."""
    groups: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return groups


def move_into_flat(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Allocate one flat buffer for ``tensors`` and make each of them a view into it."""
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=device)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            view = flat[offset : offset + t.numel()].view(t.shape)
            view.copy_(t)
            t.data = view  # the same Parameter object, now backed by the flat buffer
            offset += t.numel()
    return flat


# [flat-layout]


class FastDataParallel(BucketedReduce, GraphCapture, nn.Module):
    """DataParallel with kept replicas, overlapped gradient reduction and optional CUDA graphs.

    Same constructor as `learn_parallel.DataParallel` (``module``,
    ``device_ids``, ``output_device``, ``dim``) plus the rung switches; see the
    module docstring for what each does and what it requires.
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
        super().__init__()
        self.module = module
        self.dim = dim
        self.devices: list[Device] = resolve_device_ids(device_ids)
        self.src_device = self.devices[0]
        self.output_device = (
            self.src_device if output_device is None else to_device(output_device, allow_cpu=True)
        )
        if cuda_graphs and self.src_device.is_simulated:
            raise ValueError(
                "cuda_graphs=True captures CUDA graphs, which need CUDA GPUs; these devices "
                "are simulated on the CPU. Use cuda_graphs=False here."
            )
        self.overlap_reduce = overlap_reduce
        self.cuda_graphs = cuda_graphs
        check_on_source_device(module, self.src_device)
        self._params = list(module.parameters())
        self._buffers_ = list(module.buffers())
        if any(b.requires_grad for b in self._buffers_):
            raise ValueError(
                "FastDataParallel reduces gradients of parameters only, but the module has a "
                "buffer that requires grad. Make it a Parameter, or use DataParallel."
            )
        self._build_replicas()
        self._build_buckets(bucket_mb if overlap_reduce else float("inf"))
        # On GPUs, buckets reduced during backward run on side streams, so that the
        # copies do not hold up the compute streams (see _reduce).
        self._side_streams = (
            [torch.cuda.Stream(d.index) for d in self.devices]
            if overlap_reduce and not self.src_device.is_simulated
            else None
        )
        self._lock = threading.Lock()
        self._callback_queued = False
        self._graph_shapes: list[tuple] | None = None
        self._graph_error: str | None = None  # why capturing failed, once it has
        self._caller_streams: list[torch.cuda.Stream] = []  # set by each forward on GPUs
        self._used = len(self.devices)
        self.overlapped_reductions = 0

    # [kept-replicas]
    def _build_replicas(self) -> None:
        """One clone per device, its tensors moved into one flat buffer per dtype."""
        self._replicas: list[nn.Module] = []  # a plain list: not submodules, not in parameters()
        self._flats: list[dict[torch.dtype, torch.Tensor]] = []
        self._replica_params: list[list[torch.Tensor]] = []
        tensors = self._params + self._buffers_
        self._groups = group_by_dtype(tensors)
        for device in self.devices:
            replica = clone_to(self.module, device)
            mine = list(replica.parameters()) + list(replica.buffers())
            flats = {
                dtype: move_into_flat([mine[i] for i in positions], device.torch_device)
                for dtype, positions in self._groups.items()
            }
            self._replicas.append(replica)
            self._flats.append(flats)
            self._replica_params.append(mine[: len(self._params)])
            if device is self.devices[0]:
                # Replica 0's tensors per dtype, the targets of each step's refresh.
                self._first_views = {d: [mine[i] for i in p] for d, p in self._groups.items()}
                self._first_buffers = mine[len(self._params) :]
        self._originals = {d: [tensors[i] for i in p] for d, p in self._groups.items()}
        self._module_pairs = list(
            zip(self.module.modules(), *(r.modules() for r in self._replicas))
        )

    def _refresh(self, count: int) -> None:
        """Copy the original's parameters and buffers into the first ``count`` replicas.

        Per dtype: one multi-tensor copy into replica 0's flat buffer, then one
        device-to-device copy of that buffer into each other replica's: a
        coalesced broadcast, with no module rebuilt.
        """
        with torch.no_grad():
            for dtype, originals in self._originals.items():
                torch._foreach_copy_(self._first_views[dtype], originals)
                for flats in self._flats[1:count]:
                    flats[dtype].copy_(self._flats[0][dtype], non_blocking=True)
        self._copy_training_flags(count)

    def _copy_training_flags(self, count: int) -> None:
        """A submodule switched to eval() must be eval() in every replica too."""
        for original, *replicas in self._module_pairs:
            for replica in replicas[:count]:
                replica.training = original.training

    # [kept-replicas]

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        self._check_source()
        if not self.src_device.is_simulated:
            # The worker threads adopt these streams; the reduce orders itself after them.
            self._caller_streams = [torch.cuda.current_stream(d.index) for d in self.devices]
        with phase("scatter"):
            inputs, kwargs = scatter_kwargs(inputs, kwargs, self.devices, self.dim)
        if not inputs and not kwargs:
            inputs, kwargs = ((),), ({},)
        if len(self.devices) == 1:
            with phase("forward", self.src_device):
                return self.module(*inputs[0], **kwargs[0])
        self._used = len(inputs)
        if torch.is_grad_enabled():
            self._reset_backward_state()
        if self.cuda_graphs and torch.is_grad_enabled() and self.module.training:
            # Before the refresh: capturing runs warm-up steps that touch the buffers.
            self._graph_replicas(inputs, kwargs)
        with phase("replicate"):
            self._refresh(self._used)
        replicas = self._replicas[: self._used]
        outputs = parallel_apply(replicas, inputs, kwargs, self.devices[: self._used])
        self._copy_back_buffers()
        with phase("gather"):
            return gather(outputs, self.output_device, dim=self.dim)

    def _copy_back_buffers(self) -> None:
        """Replica 0's buffers (BatchNorm statistics) become the original's, as in DataParallel."""
        if self._buffers_ and self.module.training:
            with torch.no_grad():
                torch._foreach_copy_(self._buffers_, self._first_buffers)

    def _check_source(self) -> None:
        expected_tensors = self._params + self._buffers_
        for expected, tensor in zip(expected_tensors, self._all_tensors(), strict=False):
            if expected is not tensor:
                raise RuntimeError(
                    "The wrapped module's parameters or buffers were replaced after "
                    "FastDataParallel was built (module.to(), a new Parameter, ...), so its "
                    "kept replicas no longer match. Wrap the module again."
                )
        check_on_source_device(self.module, self.src_device)

    def _all_tensors(self) -> list[torch.Tensor]:
        tensors = list(self.module.parameters()) + list(self.module.buffers())
        if len(tensors) != len(self._params) + len(self._buffers_):
            return [None] * len(tensors)  # a count mismatch: replaced for sure
        return tensors

    def train(self, mode: bool = True) -> FastDataParallel:
        super().train(mode)
        for replica in self._replicas:
            replica.train(mode)
        return self

    def extra_repr(self) -> str:
        simulated = " (simulated on the CPU)" if self.src_device.is_simulated else ""
        devices = ", ".join(map(str, self.devices))
        return (
            f"devices=[{devices}]{simulated}, output_device={self.output_device}, dim={self.dim}, "
            f"overlap_reduce={self.overlap_reduce}, cuda_graphs={self.cuda_graphs}, "
            f"buckets={len(self._buckets)}"
        )
