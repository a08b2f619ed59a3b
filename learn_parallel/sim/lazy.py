"""Lazy modules on simulated devices: ``nn.LazyLinear(4).to("sim:0")``, then a forward.

On CUDA a lazy module's uninitialized parameters move with the module and are made on
its device at the first forward. torch keeps them uninitialized through the move with
``param.data = moved``, which cannot give a CPU tensor a simulated one, and its lazy
buffers cannot hold a simulated tensor at all. So a move onto a simulated device gives
`UninitializedSimParameter` or `UninitializedSimBuffer`: simulated tensors that torch's
lazy modules still take for uninitialized, and that become ordinary simulated ones when
the first forward materializes them. An uninitialized parameter cannot leave a simulated
device (torch would need ``.data`` again): that move is refused, saying what to do.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import (
    Parameter,
    UninitializedBuffer,
    UninitializedParameter,
    UninitializedTensorMixin,
)

from learn_parallel.sim.device_ids import NAME, DeviceArg, with_index
from learn_parallel.sim.tensor import SimTensor

_TO = torch.Tensor.to
# What nn.Parameter(...) calls on the tensor it wraps; torch allows neither on uninitialized ones.
_ALSO_ALLOWED = {torch.Tensor.detach, torch.Tensor.requires_grad_}


class _UninitializedOnSim:
    """What both classes below add: torch's rules for uninitialized tensors, run on `SimTensor`."""

    cls_to_become = SimTensor  # what materialize() turns it into (a parameter keeps _is_param)

    def __new__(
        cls, requires_grad: bool = True, device: DeviceArg = None, dtype: Any = None
    ) -> Any:
        empty = torch.empty(0, device=with_index(device or NAME), dtype=dtype)
        empty.__class__ = cls  # a SimTensor of this kind: same layout, one more base class
        if issubclass(cls, Parameter):
            empty._is_param = True  # still a Parameter once materialize() makes it a SimTensor
        return empty.requires_grad_(requires_grad)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        allowed = func in cls._allowed_methods or func in _ALSO_ALLOWED
        if not (allowed or func.__class__.__name__ == "method-wrapper"):
            # torch's own refusal: "Attempted to use an uninitialized parameter in ..."
            return UninitializedTensorMixin.__torch_function__.__func__(
                cls, func, types, args, kwargs
            )
        result = SimTensor.__torch_function__(func, types, args, kwargs or {})
        if not isinstance(result, torch.Tensor) or isinstance(result, cls):
            return result
        if isinstance(result, SimTensor):  # moved, cast or detached: still uninitialized
            result.__class__ = cls
            return result
        if issubclass(cls, Parameter):
            raise RuntimeError(
                f"An uninitialized parameter of a lazy module cannot move from {args[0].device} "
                f"to {result.device} (a simulated device cannot hand it back as torch does on "
                f"GPUs). Run one forward pass first, which initializes it on {args[0].device}, "
                f"then move the module."
            )
        return UninitializedBuffer(False, result.device, result.dtype)


class UninitializedSimParameter(_UninitializedOnSim, UninitializedParameter, SimTensor):
    """A lazy module's uninitialized parameter on a simulated device."""


class UninitializedSimBuffer(_UninitializedOnSim, UninitializedBuffer, SimTensor):
    """A lazy module's uninitialized buffer on a simulated device."""


def _moved_to_sim(tensor: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """``tensor.to(*args, **kwargs)`` for an uninitialized CPU or CUDA tensor, if that is a
    simulated device (None otherwise: torch's own rules apply)."""
    kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
    try:
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
    except (TypeError, RuntimeError):
        return None  # let torch say what is wrong with the arguments
    if device is None or device.type != NAME:
        return None
    kind = UninitializedSimParameter if isinstance(tensor, Parameter) else UninitializedSimBuffer
    return kind(tensor.requires_grad, device, dtype or tensor.dtype)


def install() -> None:
    """Let torch's uninitialized parameters and buffers move onto simulated devices (once)."""
    original = UninitializedTensorMixin.__torch_function__.__func__

    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is _TO:
            moved = _moved_to_sim(args[0], args[1:], kwargs or {})
            if moved is not None:
                return moved
        return original(cls, func, types, args, kwargs)

    __torch_function__.__wrapped__ = original  # type: ignore[attr-defined]
    UninitializedTensorMixin.__torch_function__ = classmethod(__torch_function__)
