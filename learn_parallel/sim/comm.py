"""torch.nn.parallel.comm's collectives with a Python path for simulated devices.

``torch.nn.DataParallel`` (and ``scatter``, ``gather``, ``replicate``) move tensors through
``torch.nn.parallel.comm``, whose CUDA-only C++ (``torch._C._scatter``, ``_gather``,
``_broadcast_coalesced`` ...) a CPU build lacks. The functions here take their place
(`learn_parallel.sim.torch_parallel` installs them): when a simulated tensor is involved (or,
for a CPU source, when ``sim`` is the accelerator) the Python below does what the C++ does
on CUDA (same splits and copies, the source device's tensors handed back uncopied, the same
checks); every other call falls through to torch's own function.

Not modelled: NCCL (a reduction adds the copies in device order, torch's fallback without
NCCL), copy streams (every copy has finished when it returns) and bandwidth.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _get_device_index,
    _handle_complex,
    _reorder_tensors_as,
    _take_tensors,
)

from learn_parallel.sim.device_ids import NAME
from learn_parallel.sim.tensor import SimTensor

# name -> torch's own function, before `install` (what every non-simulated call runs).
ORIGINALS: dict[str, Callable[..., Any]] = {}
COMM_NAMES = ("broadcast", "broadcast_coalesced", "scatter", "gather")


def any_sim(tensors: Any) -> bool:
    return any(isinstance(t, SimTensor) for t in tensors or ())


def _sim_is_accelerator() -> bool:
    """True when a CPU tensor's "GPU" is a simulated device (no real GPU is used)."""
    return torch._utils._get_available_device_type() == NAME


def _on(index: int) -> torch.device:
    return torch.device(NAME, index)


def broadcast(tensor: torch.Tensor, devices: Any = None, *, out: Any = None) -> Any:
    """``comm.broadcast``: a copy of ``tensor`` on every device (itself on its own)."""
    sim = isinstance(tensor, SimTensor) or any_sim(out)
    if not (sim or (tensor.device.type == "cpu" and devices is not None and _sim_is_accelerator())):
        return ORIGINALS["broadcast"](tensor, devices, out=out)
    tensor = _handle_complex(tensor)
    if (devices is None) == (out is None):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got "
            f"devices={devices} and out={out}"
        )
    if out is not None:
        for i, target in enumerate(out):
            _check_sim_output(target, i)
            if target.shape != tensor.shape:
                raise RuntimeError(
                    f"Expected all output tensors to have same shape as the source tensor "
                    f"{list(tensor.shape)}, but output tensor at index {i} has shape "
                    f"{list(target.shape)}"
                )
            target.copy_(tensor, non_blocking=True)
        return list(out)
    indices = [_get_device_index(d) for d in devices]
    copies = []
    for index in indices:
        if index < 0:
            raise RuntimeError(f"Expected non-negative device index, but got {index}")
        same = index == tensor.get_device()
        copies.append(tensor if same else tensor.to(_on(index), copy=True))
    return copies


def broadcast_coalesced(
    tensors: Sequence[torch.Tensor], devices: Any, buffer_size: int = 10485760
) -> list[list[torch.Tensor]]:
    """``comm.broadcast_coalesced``, as CUDA does it: one flat copy per chunk of tensors.

    ``devices[0]`` gets the very tensors it was given; every other device gets
    detached pieces of one flat copy per chunk (contiguous, their own version
    counters), which is why replicas' parameters share one buffer's storage.
    """
    if not (any_sim(tensors) or (_sim_is_accelerator() and not _any_cuda(tensors))):
        return ORIGINALS["broadcast_coalesced"](tensors, devices, buffer_size)
    # Below __torch_function__, where CUDA's C++ works: a lazy module's uninitialized
    # parameters are copied as the empty tensors they are. They get here with or without
    # gradients: with them, autograd's view_as on Broadcast's outputs refuses them right after
    # this copy; under no_grad, torch's replicate refuses the module ("Modules with
    # uninitialized parameters").
    with torch._C.DisableTorchFunctionSubclass():
        return _broadcast_coalesced(tensors, devices, buffer_size)


def _broadcast_coalesced(
    tensors: Sequence[torch.Tensor], devices: Any, buffer_size: int
) -> list[list[torch.Tensor]]:
    indices = [_get_device_index(d) for d in devices]
    tensors = [_handle_complex(t) for t in tensors]
    if any(t.get_device() != indices[0] for t in tensors):
        raise RuntimeError(f"All tensors must be on devices[0]: {indices[0]}")
    if any(t.is_sparse for t in tensors):
        raise NotImplementedError(_NO_SPARSE.format(what="broadcast_coalesced"))
    outputs: list[list[torch.Tensor]] = [list(tensors)] + [[] for _ in indices[1:]]
    with torch.no_grad():
        for chunk in _take_tensors(tensors, buffer_size):
            flat = _flatten_dense_tensors(chunk)
            for index, device_outputs in zip(indices[1:], outputs[1:]):
                copy = flat.to(_on(index), copy=True)
                device_outputs.extend(_unflatten(copy, chunk))
    # A list per device, as CUDA's (torch's Broadcast assigns into them for complex tensors).
    return [outputs[0]] + [list(_reorder_tensors_as(o, tensors)) for o in outputs[1:]]


def _unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    # torch's _unflatten_dense_tensors would mix devices: its `like` tensors only give shapes.
    pieces, offset = [], 0
    for tensor in like:
        # .data, not .detach(): each piece gets a version counter of its own, as CUDA's
        # (comm.cpp, "Version Counter"), so an in-place update of one replica buffer does not
        # invalidate another saved for backward
        pieces.append(flat.narrow(0, offset, tensor.numel()).view(tensor.size()).data)
        offset += tensor.numel()
    return pieces


def _any_cuda(tensors: Sequence[torch.Tensor]) -> bool:
    return any(t.device.type == "cuda" for t in tensors)


def scatter(
    tensor: torch.Tensor,
    devices: Any = None,
    chunk_sizes: Any = None,
    dim: int = 0,
    streams: Any = None,
    *,
    out: Any = None,
) -> tuple[torch.Tensor, ...]:
    """``comm.scatter``: ``tensor.chunk`` (or a split by ``chunk_sizes``), piece i to device i.

    As on CUDA, a short tensor gives fewer pieces than devices, and a piece whose
    device is the source's is a view, not a copy. Streams are accepted and not
    used: every simulated copy has finished when it returns.
    """
    sim = isinstance(tensor, SimTensor) or any_sim(out)
    if not (sim or (tensor.device.type == "cpu" and _sim_is_accelerator())):
        return ORIGINALS["scatter"](tensor, devices, chunk_sizes, dim, streams, out=out)
    tensor = _handle_complex(tensor)
    if out is not None:
        return _scatter_out(tensor, out, dim, devices, chunk_sizes)
    indices = [_get_device_index(d) for d in devices]
    if not indices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is None:
        pieces = tensor.chunk(len(indices), dim)
    else:
        if len(chunk_sizes) != len(indices):
            raise RuntimeError(
                f"Expected devices and chunk_sizes to be of same length, but got "
                f"len(devices) = {len(indices)} and len(chunk_sizes) = {len(chunk_sizes)}"
            )
        pieces = tensor.split(list(chunk_sizes), dim)
    source = tensor.get_device()
    return tuple(
        piece if index == source else piece.to(_on(index), non_blocking=True)
        for piece, index in zip(pieces, indices)
    )


def _scatter_out(
    tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int, devices: Any, chunk_sizes: Any
) -> tuple[torch.Tensor, ...]:
    for name, given in (("devices", devices), ("chunk_sizes", chunk_sizes)):
        if given is not None:
            raise RuntimeError(
                f"'{name}' must not be specified when 'out' is specified, but got {name}={given}"
            )
    if not out:
        raise RuntimeError("Expected at least one output tensor to scatter to")
    dim = dim % tensor.dim()
    for i, target in enumerate(out):
        _check_sim_output(target, i)
        if target.dim() != tensor.dim() or any(
            a != b for d, (a, b) in enumerate(zip(target.shape, tensor.shape)) if d != dim
        ):
            raise RuntimeError(
                f"Output tensor at index {i} has incorrect shape: {list(target.shape)}. "
                f"Expected same shape except for scatter dim {dim} as the source tensor: "
                f"{list(tensor.shape)}"
            )
    sizes = [t.size(dim) for t in out]
    if sum(sizes) != tensor.size(dim):
        raise RuntimeError(
            f"Total size for output tensors along scatter dim {dim} does not match the "
            f"source tensor size at dim {dim}. Expected {tensor.size(dim)}, but got total "
            f"size {sum(sizes)}"
        )
    for target, piece in zip(out, tensor.split(sizes, dim)):
        target.copy_(piece, non_blocking=True)
    return tuple(out)


def gather(
    tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: Any = None
) -> torch.Tensor:
    """``comm.gather``: one new tensor on ``destination`` (-1 or "cpu": the host), filled
    piece by piece along ``dim``; its dtype is the first tensor's."""
    if not (any_sim(tensors) or isinstance(out, SimTensor)):
        return ORIGINALS["gather"](tensors, dim, destination, out=out)
    tensors = [_handle_complex(t) for t in tensors]
    if out is not None and destination is not None:
        raise RuntimeError(
            f"'destination' must not be specified when 'out' is specified, but got "
            f"destination={destination}"
        )
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    if (
        first.dim() == 0
    ):  # what CUDA's gather says too (torch.nn.parallel's Gather unsqueezes first)
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    dim = dim % first.dim()
    expected = list(first.shape)
    for i, tensor in enumerate(tensors):
        if not isinstance(tensor, SimTensor):
            raise RuntimeError(
                f"Expected all input tensors to be on simulated devices (CUDA tensors on "
                f"GPUs), but tensor at index {i} was on device {tensor.device}"
            )
        if tensor.dim() != len(expected):
            raise RuntimeError(
                f"Expected all input tensors to have the same number of dimensions, but "
                f"tensor at index {i} has {tensor.dim()} dimensions, (expected {len(expected)})"
            )
        expected[dim] = tensor.size(dim)
        if list(tensor.shape) != expected:
            raise RuntimeError(
                f"Input tensor at index {i} has invalid shape {list(tensor.shape)}, but "
                f"expected {expected}"
            )
    expected[dim] = sum(t.size(dim) for t in tensors)
    if out is None:
        if destination == -1:  # torch's own warning, word for word
            warnings.warn(
                "Using -1 to represent CPU tensor is deprecated. Please use a "
                'device object or string instead, e.g., "cpu".',
                FutureWarning,
                stacklevel=2,
            )
        index = _get_device_index(destination, allow_cpu=True, optional=True)
        target = torch.device("cpu") if index == -1 else _on(index)
        formats = {_memory_format(t) for t in tensors}
        form = formats.pop() if len(formats) == 1 else torch.contiguous_format
        out = torch.empty(expected, dtype=first.dtype, device=target, memory_format=form)
    elif list(out.shape) != expected:
        raise RuntimeError(
            f"Expected out tensor to have shape {expected}, but got {list(out.shape)}"
        )
    offset = 0
    for tensor in tensors:
        out.narrow(dim, offset, tensor.size(dim)).copy_(
            tensor, non_blocking=out.device.type != "cpu"
        )
        offset += tensor.size(dim)
    return out


def _memory_format(tensor: torch.Tensor) -> torch.memory_format:
    channels_last = tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
    if channels_last and not tensor.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


def _check_sim_output(target: torch.Tensor, i: int) -> None:
    if not isinstance(target, SimTensor):
        raise RuntimeError(
            f"Expected all output tensors to be on simulated devices (CUDA tensors on GPUs), "
            f"but output tensor at index {i} has device '{target.device}'"
        )


_NO_SPARSE = (
    "torch.nn.parallel.comm.{what} on simulated devices takes dense tensors only: "
    "sparse tensors cannot live on them. Convert with .to_dense(), or run on GPUs."
)
