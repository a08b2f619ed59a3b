"""The tensor that lives on a simulated device: a wrapper around a CPU tensor.

`SimTensor` reports device ``sim:i`` and holds a plain CPU tensor (``_data``). Every
operation on it reaches `SimTensor.__torch_dispatch__` *below* autograd, which checks
that all its tensors sit on one simulated device (or are CPU scalars, which CUDA also
accepts), runs the operation on the CPU tensors and wraps the results on that device.
`SimTensor.__torch_function__`, *above* autograd, applies autocast and guards hooks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from learn_parallel.sim.device_ids import NAME, device_index, with_index_given
from learn_parallel.sim.generators import draws_from, generator
from learn_parallel.sim.grads import HOOK_REGISTRARS, guarded_hook
from learn_parallel.sim.memory import counters
from learn_parallel.sim.ops import AUTOCAST_TO, Plan, foreach_per_device, new_plan, plans

_aten = torch.ops.aten

_devices: dict[int, torch.device] = {}  # torch.device("sim", i), made once

_NEW_TENSOR = torch.Tensor.new_tensor
_TO = torch.Tensor.to

# Inference mode (SimTensor.__new__): under ``torch.inference_mode()`` a view of a normal
# tensor is a normal tensor (its version counter is its base's); a wrapper made there would be
# an inference tensor, which PyTorch refuses to give the base's version counter. So the
# wrapper of a CPU tensor that is not an inference tensor is made outside inference mode.
_inference_mode = torch.is_inference_mode_enabled


# Composite operations that reach __torch_dispatch__ undecomposed where no autograd step
# decomposes them (under inference mode, or on an inference tensor), answered on the wrappers:
# run on the CPU tensor, ``x.to("sim:1")`` or ``x.cpu()`` would be a CPU-to-CPU no-op giving
# back ``x``, and module.to() would be told a CPU and a simulated tensor can share ``.data``.
def _decomposed(func: Any, *args: Any, **kwargs: Any) -> Any:
    return func.decompose(*args, **kwargs)


def _same_kind(func: Any, a: torch.Tensor, b: torch.Tensor) -> bool:
    return isinstance(a, SimTensor) == isinstance(b, SimTensor)


_UNDECOMPOSED = {op: _decomposed for op in (_aten.to.dtype_layout, _aten.to.device)}
_UNDECOMPOSED |= {_aten.to.dtype: _decomposed, _aten.to.other: _decomposed}
_UNDECOMPOSED[_aten._has_compatible_shallow_copy_type.default] = _same_kind


# How ``tensor.data = other`` reaches __torch_function__.
_SET_DATA = torch._C.TensorBase.data.__set__


class SimTensor(torch.Tensor):
    """A tensor on simulated device ``sim:index``, backed by a CPU tensor (``_data``)."""

    _data: torch.Tensor
    _index: int

    @staticmethod
    def __new__(cls, data: torch.Tensor, index: int, *, track: bool = True) -> SimTensor:
        if _inference_mode() and not data.is_inference():  # see _inference_mode
            with torch.inference_mode(False):  # a view of a normal tensor: normal, as on the CPU
                return SimTensor(data, index, track=track)
        if data.layout != torch.strided:
            raise NotImplementedError(
                f"A {data.layout} tensor cannot live on a simulated device: "
                "they hold dense tensors only. Keep it on the CPU, or use .to_dense() first."
            )
        device = _devices.get(index)
        if device is None:
            device = _devices[index] = torch.device(NAME, index)
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            data.size(),
            strides=data.stride(),
            storage_offset=data.storage_offset(),
            dtype=data.dtype,
            layout=data.layout,
            device=device,
            requires_grad=data.requires_grad,
        )
        wrapper._data = data
        wrapper._index = index
        if track:  # views of a simulated tensor share its storage, counted already
            counters.track(data, index)
        return wrapper

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Above autograd, so a cast is recorded as on GPUs: autocast("sim")
        # follows CPU autocast's rules for the operations listed below.
        kwargs = kwargs or {}
        if torch.is_autocast_enabled(NAME):
            dtype = AUTOCAST_TO.get(func)
            if dtype is not None:
                dtype = torch.get_autocast_dtype(NAME) if dtype == "low" else dtype
                args, kwargs = _cast((args, kwargs), dtype)
        if func in HOOK_REGISTRARS and len(args) > 1:
            args = (args[0], guarded_hook(args[1]), *args[2:])
        elif func is _TO:  # a bare "sim" is the current device, as a bare "cuda" is
            args, kwargs = with_index_given(args, kwargs)
        elif func is _NEW_TENSOR and kwargs.get("device") is None:
            # PyTorch makes it under a device guard, which a backend written in Python
            # cannot set: name the device, so it lands on the tensor's, as on GPUs.
            kwargs = {**kwargs, "device": args[0].device}
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **kwargs)
        if func == _SET_DATA and isinstance(args[1], SimTensor):  # `==`: a new wrapper per access
            # ``param.data = other`` swaps the C++ metadata only: point the wrapper at
            # the other tensor's CPU data too, so it shares storage as it would on a GPU.
            args[0]._data, args[0]._index = args[1]._data, args[1]._index
        return result

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        # Print as torch prints a CUDA tensor: tensor([...], device='sim:1').
        text = super().__repr__(tensor_contents=tensor_contents)
        name = type(self).__name__
        return "tensor(" + text[len(name) + 1 :].replace("\n" + " " * (len(name) + 1), "\n       ")

    def __format__(self, spec: str) -> str:
        # torch formats only plain 0-dim tensors through .item(); printing needs it too.
        if self.dim() == 0:
            return self.item().__format__(spec)
        return super().__format__(spec)

    # A traceable wrapper subclass: module.to("sim:0") then swaps each parameter
    # in place (as .data = ... does on GPUs), so tied weights stay one object.
    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return ["_data"], self._index

    @staticmethod
    def __tensor_unflatten__(inner: dict, index: int, size: Any, stride: Any) -> SimTensor:
        return SimTensor(inner["_data"], index)

    def tolist(self) -> Any:  # torch refuses .tolist() on subclasses; printing needs it
        return self._data.tolist()

    def data_ptr(self) -> int:
        return self._data.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        return self._data.untyped_storage()

    def __deepcopy__(self, memo: dict) -> SimTensor:
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = SimTensor(self._data.clone(), self._index)
        new.requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):
            new._is_param = True
        if self.grad is not None:
            new.grad = self.grad.__deepcopy__(memo)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: int) -> tuple:
        # Saved as PyTorch saves a tensor of a backend without storage: its CPU copy and
        # device. torch.load (weights-only too) rebuilds it there, or where map_location says.
        rebuild = torch._utils._rebuild_device_tensor_from_cpu_tensor
        return (rebuild, (self._data.detach(), self.dtype, str(self.device), self.requires_grad))

    def numpy(self, *, force: bool = False) -> Any:
        if force:  # numpy(force=True) copies to the host, as for a CUDA tensor
            return self.cpu().numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            f"Use Tensor.cpu() to copy the tensor to host memory first."
        )

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func in _UNDECOMPOSED:  # see _UNDECOMPOSED
            return _UNDECOMPOSED[func](func, *args, **(kwargs or {}))
        plan = plans.get(id(func)) or new_plan(func)
        if plan.refuse is not None:  # e.g. a sparse gradient, which cannot live here
            plan.refuse(args, kwargs)
        # id(what the CPU sees) -> the argument, so in-place results come back as given.
        given: dict[int, torch.Tensor] = {}
        found: list[Any] = []  # every tensor's device: a sim index (int) or a torch.device
        unwrapped = _unwrap_arguments(args, plan, given, found)
        kwargs = {k: _unwrap(v, given, found) for k, v in kwargs.items()} if kwargs else {}
        here = found[0] if type(found[0]) is int else next(d for d in found if type(d) is int)
        if not plan.transfer:
            for other in found:
                if other != here:
                    if plan.foreach and len({t.device for t in args[0]}) > 1:
                        # A slower path, as on CUDA (CUDA's goes per tensor; this one per device).
                        return foreach_per_device(func, args, kwargs, given)
                    raise RuntimeError(
                        f"Expected all tensors to be on the same device, but found at least "
                        f"two devices, {NAME}:{here} and {_name(other)}! (in {func.__name__}) "
                        f"Move them to one device first, e.g. with .to('{NAME}:{here}')."
                    )
        target: Any = here
        if plan.device and kwargs.get("device") is not None:
            wanted = torch.device(kwargs["device"])
            if wanted.type == NAME:
                target = device_index(wanted)  # an index that does not exist fails here
                kwargs["device"] = torch.device("cpu")  # computed on the CPU, then wrapped
            else:
                target = wanted
        if plan.generator:
            kwargs["generator"] = draws_from(kwargs.get("generator"), here)
        if plan.draw is not None:  # random, but no generator argument to hand the device's in
            out = plan.draw(func, unwrapped, kwargs, generator(here))
        else:
            out = plan.kernel(*unwrapped, **kwargs)
        if "out" in kwargs:
            for wrapper in [given[id(t)] for t in tree_flatten(kwargs["out"])[0]]:
                if isinstance(wrapper, SimTensor) and wrapper.shape != wrapper._data.shape:
                    raise RuntimeError(
                        f"{func.__name__}: an out= tensor on a simulated device cannot be "
                        f"resized; pass one of the result's shape, or drop out=."
                    )
        if plan.metadata_in_place:
            # transpose_ and friends changed the CPU tensor's shape: give the wrapper
            # the same shape (these only touch metadata, so they run on it as well).
            with torch._C._DisableTorchDispatch():
                func(given[id(unwrapped[0])], *unwrapped[1:], **kwargs)
        if type(target) is not int:
            result = _wrap(out, given, None, False)
        elif isinstance(out, torch.Tensor):  # the common case, without the recursion
            result = given.get(id(out))
            if result is None:
                result = SimTensor(out, target, track=not plan.view)
        else:
            result = _wrap(out, given, target, not plan.view)
        if plan.cpu_result is not None:  # e.g. batch_sizes: on the CPU, as CUDA gives it
            stays = plan.cpu_result
            result = (*result[:stays], out[stays], *result[stays + 1 :])
        return result


def _name(device: Any) -> str:
    return f"{NAME}:{device}" if type(device) is int else str(device)


def _unwrap(x: Any, given: dict, found: list) -> Any:
    """``x`` with every SimTensor replaced by its CPU tensor (through lists and tuples)."""
    if isinstance(x, SimTensor):
        given[id(x._data)] = x
        found.append(x._index)
        return x._data
    if isinstance(x, torch.Tensor):
        given[id(x)] = x
        if x.dim() > 0:  # CPU scalars (0-dim) may join, as on CUDA
            found.append(x.device)
        return x
    if type(x) is list or type(x) is tuple:
        return type(x)(_unwrap(v, given, found) for v in x)
    return x


def _unwrap_arguments(args: tuple, plan: Plan, given: dict, found: list) -> list:
    """The positional arguments unwrapped; some may stay on the CPU (see `_Plan`)."""
    unwrapped = []
    for position, x in enumerate(args):
        if isinstance(x, SimTensor):  # the common case first
            given[id(x._data)] = x
            found.append(x._index)
            x = x._data
        elif position == plan.cpu_argument and isinstance(x, torch.Tensor):
            pass  # on the CPU by design: not checked against the rest
        elif position == 1 and plan.indexing and x is not None:
            on = []  # index tensors: on the CPU or on the indexed tensor's device
            x = _unwrap(x, given, on)
            found.extend(d for d in on if type(d) is int)
        else:
            x = _unwrap(x, given, found)
        unwrapped.append(x)
    return unwrapped


def _wrap(x: Any, given: dict, index: int | None, track: bool = True) -> Any:
    """CPU results put on ``sim:index`` (left as they are for index None)."""
    if isinstance(x, torch.Tensor):
        same = given.get(id(x))  # an in-place operation returns its argument
        if same is not None:
            return same
        return x if index is None else SimTensor(x, index, track=track)
    if type(x) is list or type(x) is tuple:
        return type(x)(_wrap(v, given, index, track) for v in x)
    return x


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, SimTensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    if type(value) is list or type(value) is tuple:
        return type(value)(_cast(v, dtype) for v in value)
    if type(value) is dict:
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value
