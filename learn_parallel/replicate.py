"""Replicate a module onto every device, with gradients wired back to the original.

A replica is a shallow copy of each submodule whose parameters are *outputs of
an autograd Function* (`Broadcast`) instead of leaf tensors. Backward through
`Broadcast` sums the replicas' gradients onto the source device, so they land
in the original parameters' ``.grad`` exactly as if one device had seen the
whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
import torch.cuda.comm
from torch import nn
from torch.autograd import Function
from torch.nn.parameter import is_lazy

from learn_parallel.devices import Device, DeviceLike, resolved
from learn_parallel.phases import phase

ModuleT = TypeVar("ModuleT", bound=nn.Module)


# [copy-to-devices]
def copy_to_devices(tensors: Sequence[torch.Tensor], devices: Sequence[Device]) -> list[list]:
    """``result[d][t]`` is tensor ``t`` on device ``d``; device 0 keeps the originals.

    On GPUs, `broadcast_coalesced` packs the small tensors into a few large
    buffers, so a model with hundreds of parameters costs a few copies, not
    hundreds. On simulated devices each tensor is copied with ``.to()``.
    """
    if not devices[0].is_simulated:
        # Coalescing sends complex tensors as real (..., 2) views: turn them back.
        copies = torch.cuda.comm.broadcast_coalesced(_as_real(tensors), [d.index for d in devices])
        if not any(t.is_complex() for t in tensors):
            return copies
        return [list(tensors)] + [_as_complex_like(c, tensors) for c in copies[1:]]
    return [list(tensors)] + [[t.to(d.torch_device) for t in tensors] for d in devices[1:]]


def reduce_add_to_source(per_device: Sequence[Sequence[torch.Tensor]], source: Device) -> list:
    """Sum tensor ``t`` over all devices, onto the source device."""
    if not source.is_simulated:
        summed = torch.cuda.comm.reduce_add_coalesced(
            [_as_real(grads) for grads in per_device], destination=source.index
        )
        return _as_complex_like(summed, per_device[0])
    # One copy at a time onto the source device, as torch.cuda.comm.reduce_add
    # does: the source holds the sum and one incoming copy, never all of them.
    target = source.torch_device
    sums = []
    for copies in zip(*per_device):
        total = copies[0].to(target, copy=True)
        for other in copies[1:]:
            total.add_(other.to(target))
        sums.append(total)
    return sums


# [copy-to-devices]


def _as_real(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.view_as_real(t) if t.is_complex() else t for t in tensors]


def _as_complex_like(
    tensors: Sequence[torch.Tensor], like: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Undo `_as_real` for the tensors whose counterpart in ``like`` is complex."""
    result = []
    for tensor, original in zip(tensors, like):
        if original.is_complex():
            # A slice of a coalesced buffer may start at an odd float offset.
            if tensor.storage_offset() % 2 or not tensor.is_contiguous():
                tensor = tensor.clone()
            tensor = torch.view_as_complex(tensor)
        result.append(tensor)
    return result


# [broadcast]
class Broadcast(Function):
    """Forward: one copy of every tensor per device. Backward: sum them back."""

    @staticmethod
    def forward(ctx, devices, *tensors):
        ctx.devices = devices
        ctx.num_tensors = len(tensors)
        copies = copy_to_devices(tensors, devices)
        # Copies of tensors that need no gradient (frozen weights) stay that way.
        frozen = [i for i, t in enumerate(tensors) if not t.requires_grad]
        ctx.mark_non_differentiable(*[copies[d][i] for d in range(len(devices)) for i in frozen])
        return tuple(t for per_device in copies for t in per_device)

    @staticmethod
    def backward(ctx, *grads):
        with phase("reduce"):
            summed = ReduceAddToSource.apply(ctx.devices, ctx.num_tensors, *grads)
        return (None, *summed)


class ReduceAddToSource(Function):
    """Forward: sum per-device gradients onto ``devices[0]``. Backward: Broadcast."""

    @staticmethod
    def forward(ctx, devices, num_tensors, *grads):
        ctx.devices = devices
        per_device = [grads[i : i + num_tensors] for i in range(0, len(grads), num_tensors)]
        return tuple(reduce_add_to_source(per_device, devices[0]))

    @staticmethod
    def backward(ctx, *grads):
        # Being linear, the reduction's own backward is a broadcast: this is
        # what makes double backward (gradients of gradients) work.
        return (None, None, *Broadcast.apply(ctx.devices, *grads))


# [broadcast]


def _copies_per_device(
    tensors: list[torch.Tensor], devices: list[Device], detach: bool
) -> list[list[torch.Tensor]]:
    if not tensors:
        return [[] for _ in devices]
    if detach:
        with torch.no_grad():
            return [[t.detach() for t in ts] for ts in copy_to_devices(tensors, devices)]
    flat = Broadcast.apply(devices, *tensors)
    n = len(tensors)
    return [list(flat[i : i + n]) for i in range(0, len(flat), n)]


def check_on_source_device(
    module: nn.Module, source: Device
) -> tuple[list[nn.Module], list[torch.Tensor], list[torch.Tensor]]:
    """Raise unless every parameter and buffer of ``module`` is on ``source``.

    Replicas are copied from the source device, so a tensor anywhere else would
    either be missed or break the copy halfway. The message names the tensor.
    Every wrapper makes this check once per forward: itself on one device,
    through `replicate` on several. The same walk over the module collects what
    `replicate` copies (every submodule, parameter and buffer once, tied ones
    too), so a step walks the module only once; lazy parameters are refused.
    """
    modules, params, buffers, names = [], [], [], {}
    for prefix, submodule in module.named_modules():
        modules.append(submodule)
        for table, found in ((submodule._parameters, params), (submodule._buffers, buffers)):
            for name, tensor in table.items():
                if tensor is None or id(tensor) in names:
                    continue
                qualified = names[id(tensor)] = f"{prefix}.{name}" if prefix else name
                found.append(tensor)
                if is_lazy(tensor):
                    raise RuntimeError(
                        f"Cannot replicate a module with uninitialized (lazy) parameter "
                        f"'{qualified}'. Run one forward pass on a small batch first so its "
                        f"shape is known, then wrap it."
                    )
    for kind, tensors in (("parameter", params), ("buffer", buffers)):
        for tensor in tensors:
            if tensor.device != source.torch_device:
                raise RuntimeError(
                    f"module must have its parameters and buffers on device {source} "
                    f"(device_ids[0]) but {kind} '{names[id(tensor)]}' is on {tensor.device}. "
                    f"Move the module there before the forward pass "
                    f"(module.to('{source.torch_device}')), or put that device first "
                    f"in device_ids."
                )
    return modules, params, buffers


_DEFAULT_SHALLOW_COPY = nn.Module._replicate_for_data_parallel


def shallow_copy(module: nn.Module) -> tuple[nn.Module, bool]:
    """An empty replica of one module, and whether its attributes may be set directly.

    The replica shares the original's Python attributes and hooks (a copy of its
    ``__dict__``) but gets its own slots for parameters, buffers and children.
    ``nn.Module`` offers this as ``_replicate_for_data_parallel``, but going
    through ``Module.__setattr__`` costs microseconds per attribute: for
    ResNet-18 on 4 GPUs that was about 2.6 ms of every step. So the common case
    fills the instance dict directly; a module that overrides the method (RNNs
    copy their lists of weights) keeps its override and its ``__setattr__``.
    """
    if type(module)._replicate_for_data_parallel is not _DEFAULT_SHALLOW_COPY:
        return module._replicate_for_data_parallel(), False
    replica = module.__new__(type(module))
    state = module.__dict__.copy()
    state["_parameters"] = {}
    state["_buffers"] = state["_buffers"].copy()
    state["_modules"] = state["_modules"].copy()
    state["_is_replica"] = True  # makes replica.zero_grad() warn that it does nothing
    object.__setattr__(replica, "__dict__", state)
    return replica, True


def replicate(
    network: ModuleT, devices: Sequence[DeviceLike], detach: bool = False
) -> list[ModuleT]:
    """One replica of ``network`` per device; replica i lives on ``devices[i]``.

    Parameters go through `Broadcast` (once each, so tied weights stay tied)
    unless ``detach`` is set, as DataParallel does under ``torch.no_grad()``.
    Buffers are copied detached unless they require grad. Replica 0 shares
    storage with the original, which is why only its changes to buffers (such
    as BatchNorm running statistics) survive the step.
    """
    devices = resolved(devices)
    modules, params, buffers = check_on_source_device(network, devices[0])
    grad_buffers = [b for b in buffers if b.requires_grad]
    plain_buffers = [b for b in buffers if not b.requires_grad]

    param_copies = _copies_per_device(params, devices, detach)
    grad_buffer_copies = _copies_per_device(grad_buffers, devices, detach)
    plain_buffer_copies = _copies_per_device(plain_buffers, devices, detach=True)

    # Where each original tensor's per-device copies live: (copies, position).
    slot = {id(t): (param_copies, i) for i, t in enumerate(params)}
    slot.update({id(t): (grad_buffer_copies, i) for i, t in enumerate(grad_buffers)})
    slot.update({id(t): (plain_buffer_copies, i) for i, t in enumerate(plain_buffers)})
    module_index = {id(m): i for i, m in enumerate(modules)}

    replicas_per_device = []
    for d in range(len(devices)):
        shells = [shallow_copy(m) for m in modules]
        copies = [replica for replica, _ in shells]
        for module, (replica, direct) in zip(modules, shells):
            for name, child in module._modules.items():
                replica._modules[name] = None if child is None else copies[module_index[id(child)]]
            for name, param in module._parameters.items():
                value = None
                if param is not None:
                    copies_of, i = slot[id(param)]
                    value = copies_of[d][i]
                # A plain attribute, not a Parameter: the copy is not a leaf.
                if direct:
                    replica.__dict__[name] = value
                else:
                    setattr(replica, name, value)
                # Unlike PyTorch, keep the copies visible to replica.parameters(),
                # so code like next(self.parameters()).device works in forward.
                replica._parameters[name] = value
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    copies_of, i = slot[id(buffer)]
                    replica._buffers[name] = copies_of[d][i]
        replicas_per_device.append(copies[0])
    return replicas_per_device
