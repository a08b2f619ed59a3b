"""Replicate a module onto every device, with gradients wired back to the original.

A replica is a shallow copy of each submodule whose parameters are *outputs of
an autograd Function* (`Broadcast`) instead of leaf tensors. Backward through
`Broadcast` sums the replicas' gradients onto the source device, so they land
in the original parameters' ``.grad`` exactly as if one device had seen the
whole batch. Before copying, `check_on_source_device` makes sure every tensor is
on the source device (the source-device chapter, ``book/source_device.ipynb``);
the replicate chapter (``book/replicate.ipynb``) follows the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.cuda.comm
from torch import nn
from torch.autograd import Function
from torch.nn.parameter import is_lazy

from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.phases import phase

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def check_on_source_device(
    module: nn.Module, source: Device, found: ModuleTensors | None = None, copies: bool = True
) -> None:
    """Raise unless every parameter and buffer of ``module`` is on ``source``.

    Replicas are copied from the source device; a tensor anywhere else would make
    the copy fail at once with a message that names no tensor (torch's
    ``broadcast_coalesced`` checks placement first). This message names it.
    DataParallel and its variants check once per forward: directly on one device,
    through `replicate` on several, which passes the tensors it has ``found``
    already so that a step walks the module once. Lazy parameters are refused where
    replicas will be copied (``copies``); on one device the module's own first call
    initializes them, as in torch.
    """
    found = module_tensors(module) if found is None else found
    named = [("parameter", t) for t in found.params] + [("buffer", t) for t in found.buffers]
    for _, tensor in named:
        if copies and is_lazy(tensor):
            raise RuntimeError(
                f"Cannot replicate a module with uninitialized (lazy) parameter "
                f"'{found.names[id(tensor)]}'. Run one forward pass on a small batch first "
                f"so its shape is known, then wrap it."
            )
    target = source.torch_device  # built once: the loop below runs every forward
    for kind, tensor in named:
        if tensor.device != target:
            raise RuntimeError(
                f"module must have its parameters and buffers on device {source} "
                f"(device_ids[0]) but {kind} '{found.names[id(tensor)]}' is on {tensor.device}. "
                f"Move the module there before the forward pass "
                f"(module.to('{target}')), or put that device first "
                f"in device_ids."
            )


@dataclass
class ModuleTensors:
    """What replicate copies: every submodule, parameter and buffer once (tied ones too)."""

    modules: list[nn.Module] = field(default_factory=list)
    params: list[torch.Tensor] = field(default_factory=list)
    buffers: list[torch.Tensor] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # id(tensor) -> qualified name


def module_tensors(module: nn.Module) -> ModuleTensors:
    """Walk ``module`` once, collecting its submodules, parameters and buffers."""
    found = ModuleTensors()
    for prefix, submodule in module.named_modules():
        found.modules.append(submodule)
        for table, kept in (
            (submodule._parameters, found.params),
            (submodule._buffers, found.buffers),
        ):
            for name, tensor in table.items():
                if tensor is not None and id(tensor) not in found.names:
                    found.names[id(tensor)] = f"{prefix}.{name}" if prefix else name
                    kept.append(tensor)
    return found


# [copy-to-devices]
def copy_to_devices(tensors: Sequence[torch.Tensor], devices: Sequence[Device]) -> list[list]:
    """``result[d][t]`` is tensor ``t`` on device ``d``; device 0 keeps the originals.

    `broadcast_coalesced` packs the small tensors into a few large buffers, so a
    model with hundreds of parameters costs a few copies, not hundreds, and every
    other device's tensors share its buffers' storage. On simulated devices the
    simulator gives torch's function a path of its own (`learn_parallel.sim.comm`).
    """
    # Coalescing sends complex tensors as real (..., 2) views: turn them back.
    copies = torch.cuda.comm.broadcast_coalesced(_as_real(tensors), [d.index for d in devices])
    if not any(t.is_complex() for t in tensors):
        return copies
    return [list(tensors)] + [_as_complex_like(c, tensors) for c in copies[1:]]


def reduce_add_to_source(per_device: Sequence[Sequence[torch.Tensor]], source: Device) -> list:
    """Sum tensor ``t`` over all devices, onto the source device."""
    summed = torch.cuda.comm.reduce_add_coalesced(
        [_as_real(grads) for grads in per_device], destination=source.index
    )
    return _as_complex_like(summed, per_device[0])


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
    """Forward: a copy of every tensor on each other device (the first gets the tensors
    themselves, as views). Backward: sum the gradients back onto the first."""

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


# [replicate]
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
    devices = resolve_devices(devices)
    found = module_tensors(network)  # the step's one walk over the module tree
    check_on_source_device(network, devices[0], found)
    wired = found.params + [b for b in found.buffers if b.requires_grad]
    plain = [b for b in found.buffers if not b.requires_grad]
    copy_of: list[dict[int, torch.Tensor]] = [{} for _ in devices]  # id(tensor) -> its copy
    for tensors, no_grad in ((wired, detach), (plain, True)):
        for on_device, copies in zip(copy_of, _copies_per_device(tensors, devices, no_grad)):
            on_device.update(zip(map(id, tensors), copies))
    return [_replica(found.modules, on_device) for on_device in copy_of]


def _copies_per_device(
    tensors: list[torch.Tensor], devices: list[Device], detach: bool
) -> list[list[torch.Tensor]]:
    """``result[d][t]``: tensor ``t`` on device ``d``, through `Broadcast` unless ``detach``."""
    if not tensors:
        return [[] for _ in devices]
    if detach:
        with torch.no_grad():
            return [[t.detach() for t in ts] for ts in copy_to_devices(tensors, devices)]
    flat = Broadcast.apply(devices, *tensors)
    n = len(tensors)
    return [list(flat[i : i + n]) for i in range(0, len(flat), n)]


def _replica(modules: list[nn.Module], copy_of: dict[int, torch.Tensor]) -> nn.Module:
    """A replica of ``modules[0]`` (the network) holding the tensors' copies in ``copy_of``."""
    shells = {id(module): shallow_copy(module) for module in modules}
    for module in modules:
        replica = shells[id(module)]
        for name, child in module._modules.items():
            replica._modules[name] = None if child is None else shells[id(child)]
        for name, param in module._parameters.items():
            _set_parameter_copy(replica, name, None if param is None else copy_of[id(param)])
        for name, buffer in module._buffers.items():
            if buffer is not None:
                replica._buffers[name] = copy_of[id(buffer)]
    return shells[id(modules[0])]


# [replicate]

# [shells]
_DEFAULT_SHALLOW_COPY = nn.Module._replicate_for_data_parallel


def shallow_copy(module: nn.Module) -> nn.Module:
    """An empty replica of one module: its own slots, the original's attributes.

    The replica shares the original's Python attributes and hooks (a copy of its
    ``__dict__``) but gets its own tables for parameters, buffers and children.
    ``nn.Module`` offers this as ``_replicate_for_data_parallel``; a module that
    overrides it (RNNs copy their lists of weights) keeps its override.
    """
    if not _fills_dict_directly(module):
        return module._replicate_for_data_parallel()
    replica = module.__new__(type(module))
    state = module.__dict__.copy()
    state["_parameters"] = {}
    state["_buffers"] = state["_buffers"].copy()
    state["_modules"] = state["_modules"].copy()
    state["_is_replica"] = True  # makes replica.zero_grad() warn that it does nothing
    object.__setattr__(replica, "__dict__", state)
    return replica


def _set_parameter_copy(replica: nn.Module, name: str, value: torch.Tensor | None) -> None:
    """Put a parameter's copy on ``replica``: a plain attribute, not a Parameter.

    A copy made by ``Broadcast`` with gradients on is not a leaf. Unlike PyTorch, the copy
    also stays in ``replica._parameters``, so ``next(self.parameters()).device`` works in forward.
    """
    if _fills_dict_directly(replica):
        replica.__dict__[name] = value
    else:
        setattr(replica, name, value)
    replica._parameters[name] = value


def _fills_dict_directly(module: nn.Module) -> bool:
    """Whether replicate may fill ``module``'s instance dict itself: the speed trick.

    ``Module.__setattr__`` checks the value's type and looks the name up in the
    module's tables of parameters, submodules and buffers before it stores it;
    writing to ``__dict__`` skips that, host time saved on every replica of every
    step (the replicate chapter times both ways on the machine that runs it). A
    module that keeps ``nn.Module``'s shallow copy gets its attributes set straight
    in its ``__dict__``; one that overrides it may rely on its own ``__setattr__``.
    """
    return type(module)._replicate_for_data_parallel is _DEFAULT_SHALLOW_COPY


# [shells]
