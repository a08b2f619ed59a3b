"""Replicate the libtorch way: clone the module per device, then wire gradient edges.

libtorch chose not to swap a C++ module's parameters for an autograd Function's outputs
(``Note [Replicating Modules]``), so ``data_parallel`` replicates in two steps, not `Broadcast`:

1. **clone**: every replica is a full copy of the module made on its device,
   parameters and buffers included, with no autograd history;
2. **edges**: every replica parameter gets one ``ReduceAdd`` node as its ``grad_fn``,
   whose only next edge is the original parameter, so backward sums the replicas'
   gradients into the original (in Python, a Function of our own: `ReduceAddEdge`).

`CloneDataParallel` is DataParallel with this replicate step (the libtorch
chapter, ``book/libtorch_replicate.ipynb``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import nn
from torch.autograd import Function

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.replicate import check_on_source_device

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class ReduceAddEdge(Function):
    """Forward: the clones, unchanged. Backward: their gradients summed onto the source.

    One node per original tensor, with one input per replica and one next edge
    (the original), exactly the shape of libtorch's ``ReduceAdd``.
    """

    @staticmethod
    def forward(ctx, source: torch.device, original: torch.Tensor, *clones: torch.Tensor):
        ctx.source = source
        # Returning an input makes autograd hand back a view of it with this
        # node as grad_fn: the clone's storage, the original's gradient edge.
        return clones

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        # libtorch: zeros on the destination, then add every input copied there
        # ("TODO: use nccl reduce"). Plain differentiable ops, so that under
        # create_graph=True this backward is itself recorded: double backward works.
        # The None test is only defensive: materialize_grads (on by default) hands an
        # unused clone's gradient in as zeros.
        present = [g.to(ctx.source) for g in grads if g is not None]
        total = torch.stack(present).sum(0) if present else None
        return (None, total, *([None] * len(grads)))


def clone_to(module: ModuleT, device: Device) -> ModuleT:
    """A deep copy of ``module`` made on ``device``, with no autograd history.

    Every parameter and buffer is copied first, straight to the device; seeding
    ``copy.deepcopy``'s memo with those copies makes the rest of the module (submodules,
    hooks, plain attributes) a copy that points at them; a tensor kept as a plain attribute
    is copied where it is, not moved. The memo keeps tied weights tied: one tensor, one copy.
    """
    memo: dict[int, object] = {}
    with torch.no_grad():
        for param in module.parameters():
            copied = param.detach().to(device.torch_device, copy=True)
            memo[id(param)] = nn.Parameter(copied, requires_grad=param.requires_grad)
        for buffer in module.buffers():
            memo[id(buffer)] = buffer.detach().to(device.torch_device, copy=True)
    return copy.deepcopy(module, memo)


def clone_module_by_module(module: ModuleT, device: Device) -> ModuleT:
    """What C++'s ``Cloneable::clone`` does to sharing: each module copies its own tensors.

    A copy of the module object per submodule *occurrence*, each with fresh
    copies of the tensors registered on it. A tensor registered on two modules
    (tied weights) becomes two tensors; a submodule listed twice becomes two.
    Only for comparison: the package's clone strategy uses `clone_to`.
    """
    copied = copy.copy(module)  # the Python attributes, shared; the three tables, replaced below
    with torch.no_grad():
        copied._parameters = {
            name: None
            if p is None
            else nn.Parameter(p.detach().to(device.torch_device, copy=True), p.requires_grad)
            for name, p in module._parameters.items()
        }
        copied._buffers = {
            name: None if b is None else b.detach().to(device.torch_device, copy=True)
            for name, b in module._buffers.items()
        }
    copied._modules = {
        name: None if child is None else clone_module_by_module(child, device)
        for name, child in module._modules.items()
    }
    return copied


# [clone-replicate]
def clone_replicate(
    network: ModuleT, devices: Sequence[DeviceLike], detach: bool = False
) -> list[ModuleT]:
    """libtorch's replicate: one clone per device, then a `ReduceAddEdge` per tensor.

    Unlike `learn_parallel.replicate`, replica 0 is a clone too, so nothing a
    replica does to its buffers (BatchNorm's running statistics) reaches the
    original: with this strategy the original's buffers never change in a
    DataParallel forward. ``detach`` (used under ``torch.no_grad()``) skips the
    edges.
    """
    devices = resolve_devices(devices)
    check_on_source_device(network, devices[0])
    clones = [clone_to(network, device) for device in devices]
    if detach:
        return clones
    # Tensors that need a gradient: parameters, and buffers that require grad.
    places = _places(network)
    for original in [t for t in [*network.parameters(), *network.buffers()] if t.requires_grad]:
        where = places[id(original)]
        # Detached: the edge must lead to the original only, not to the clones.
        copies = [_get(clone, where[0]).detach() for clone in clones]
        connected = ReduceAddEdge.apply(devices[0].torch_device, original, *copies)
        for clone, tensor in zip(clones, connected):
            for kind, path, name in where:  # every place a tied tensor sits
                getattr(clone.get_submodule(path), kind)[name] = tensor
    return clones


def _places(network: nn.Module) -> dict[int, list[tuple[str, str, str]]]:
    """For each tensor: every (``"_parameters"``/``"_buffers"``, module path, name) holding it."""
    places: dict[int, list[tuple[str, str, str]]] = {}
    for path, module in network.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            for name, value in getattr(module, kind).items():
                if value is not None:
                    places.setdefault(id(value), []).append((kind, path, name))
    return places


def _get(module: nn.Module, place: tuple[str, str, str]) -> torch.Tensor:
    kind, path, name = place
    return getattr(module.get_submodule(path), kind)[name]


# [clone-replicate]


class CloneDataParallel(DataParallel):
    """DataParallel that replicates the libtorch way: `clone_replicate` instead of `Broadcast`."""

    def replicate(self, module: nn.Module, device_ids: Sequence[DeviceLike]) -> list[nn.Module]:
        # Under torch.no_grad() nothing will be differentiated: skip the edges.
        return clone_replicate(module, device_ids, not torch.is_grad_enabled())
