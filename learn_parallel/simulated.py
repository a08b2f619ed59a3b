"""Simulated devices: ``sim:0``, ``sim:1`` ... that fail where GPUs fail.

Without GPUs, every simulated device is backed by the CPU. What makes them
*distinct* devices is a thin layer in pure Python:

- PyTorch reserves one device type for out-of-tree backends (``PrivateUse1``).
  We name it ``sim``, so ``torch.device("sim", 1)``, ``x.to("sim:1")`` and
  ``module.to("sim:0")`` are ordinary PyTorch calls.
- A tensor on ``sim:i`` is a `SimTensor`: a wrapper that reports device
  ``sim:i`` and holds a plain CPU tensor. Every operation on it reaches
  `SimTensor.__torch_dispatch__` *below* autograd, which checks that all its
  tensors sit on one simulated device (or are CPU scalars, which CUDA also
  accepts), runs the operation on the CPU tensors and wraps the results on
  that device. Mixing ``sim:0`` and ``sim:1``, or ``sim:0`` and a CPU tensor,
  raises the error a GPU raises; what CUDA lets the CPU give (index tensors
  and masks, packed-sequence lengths) it lets through.
- Moving between devices (``to``, ``copy_``) always copies, and only to a
  device that exists; ``torch.sim.set_device`` picks what ``"sim"`` means.
- Each device has its own random generator, seeded by ``torch.manual_seed``
  exactly as CUDA seeds every GPU: all with the same seed, on a stream that is
  not the CPU's (`learn_parallel.simulated_random`).
- A gradient on the wrong device is refused, as the autograd engine refuses
  one on GPUs (`learn_parallel.simulated_grads`).
- ``torch.save`` / ``torch.load`` (``map_location`` too) work as for CUDA tensors.
- Each device counts the bytes of the tensors that live on it, with a peak
  that can be reset (`memory_allocated`, `max_memory_allocated`).
- ``torch.autocast("sim")`` applies CPU autocast's rules to the common
  operations (matrix products, convolutions, ``linear``; losses in float32).

What this does not model: bandwidth (a copy costs a CPU memcpy), kernel
timing (every device computes on the same CPU cores, so their timings are
host clocks), asynchronous execution and streams (every operation finishes
before the next starts), device memory limits and the caching allocator.

Nothing here is registered until simulated devices are first used
(`enable`), so importing the package on a GPU machine changes nothing.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from learn_parallel import simulated_grads, simulated_random
from learn_parallel.simulated_random import draws_from, generator

NAME = "sim"


def _device_count() -> int:
    from learn_parallel.devices import device_count

    return device_count()


# --------------------------------------------------------------------------
# The current device: what ``device="sim"`` means (torch.sim.set_device)
# --------------------------------------------------------------------------

DeviceArg = int | str | torch.device | None
_current = threading.local()  # per thread, as CUDA's current device is


def current_device() -> int:
    """The index ``device="sim"`` stands for in this thread (0 until `set_device`)."""
    return getattr(_current, "index", 0)


def device_index(device: DeviceArg = None) -> int:
    """The index of an existing simulated device; ``None`` or ``"sim"`` mean the current one."""
    if isinstance(device, int):
        index = device
    else:
        where = torch.device(NAME) if device is None else torch.device(device)
        if where.type != NAME:
            raise ValueError(f"Expected a simulated device ({NAME}:i), got {where}.")
        index = current_device() if where.index is None else where.index
    count = _device_count()
    if not 0 <= index < count:
        raise RuntimeError(
            f"Invalid device ordinal: simulated device {NAME}:{index} does not exist: there "
            f"are {count} (ids 0 to {count - 1}). Set LEARN_PARALLEL_SIMULATED_DEVICES to "
            f"simulate more."
        )
    return index


def set_device(device: DeviceArg) -> None:
    """Make ``device`` the current simulated device of this thread."""
    _current.index = device_index(device)


class device:
    """``with torch.sim.device(1):`` makes ``sim:1`` the current device inside (None: no change)."""

    def __init__(self, device: DeviceArg) -> None:
        self.index = None if device is None or device == -1 else device_index(device)

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index is not None:
            set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


# --------------------------------------------------------------------------
# Per-device memory counters (random generators: learn_parallel.simulated_random)
# --------------------------------------------------------------------------


class _Memory:
    """Bytes of live tensor storage on each simulated device, and the peak since reset."""

    def __init__(self) -> None:
        # Re-entrant: a storage freed while the lock is held releases its bytes here too.
        self.lock = threading.RLock()
        self.allocated: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.storages: dict[tuple[int, int], list] = {}  # (index, ptr) -> [bytes, weak ref]

    def track(self, data: torch.Tensor, index: int) -> None:
        # PyTorch keeps one Python object per storage for as long as the storage lives,
        # so a weak reference to it says when its bytes are freed, whatever tensors or
        # wrappers (module.to() swaps them) shared it.
        storage = data.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        key = (index, storage.data_ptr())
        with self.lock:
            entry = self.storages.get(key)
            if entry is None:
                ref = _StorageRef(storage, self.release)
                ref.key = key
                entry = self.storages[key] = [0, ref]
            grown = nbytes - entry[0]
            if grown > 0:  # new, or resized by an out= operation
                entry[0] = nbytes
                total = self.allocated.get(index, 0) + grown
                self.allocated[index] = total
                if total > self.peak.get(index, 0):
                    self.peak[index] = total

    def release(self, ref: _StorageRef) -> None:
        key = ref.key
        with self.lock:
            entry = self.storages.get(key)
            if entry is not None and entry[1] is ref:
                del self.storages[key]
                self.allocated[key[0]] -= entry[0]


class _StorageRef(weakref.ref):
    """A weak reference to a storage that knows its key (cheaper than a partial per storage)."""

    __slots__ = ("key",)


_memory = _Memory()


def memory_allocated(device: DeviceArg = None) -> int:
    """Bytes of tensor storage that live on a simulated device now (default: the current one)."""
    return _memory.allocated.get(device_index(device), 0)


def max_memory_allocated(device: DeviceArg = None) -> int:
    """The most bytes a simulated device held at once since the last reset."""
    return _memory.peak.get(device_index(device), 0)


def reset_peak_memory_stats(device: DeviceArg = None) -> None:
    """Start the peak of a simulated device again from what it holds now."""
    index = device_index(device)
    with _memory.lock:
        _memory.peak[index] = _memory.allocated.get(index, 0)


# --------------------------------------------------------------------------
# The tensor that lives on a simulated device
# --------------------------------------------------------------------------

_aten = torch.ops.aten
# In-place operations that change only a tensor's shape and strides.
_METADATA_IN_PLACE = {
    _aten.transpose_,
    _aten.t_,
    _aten.squeeze_,
    _aten.unsqueeze_,
    _aten.swapdims_,
    _aten.swapaxes_,
    _aten.as_strided_,
}
# Operations that move data between devices: their tensors may sit anywhere.
_TRANSFERS = {_aten.copy_.default, _aten._to_copy.default, _aten._copy_from.default}
# Operations whose CUDA kernels take (or give) one tensor on the CPU by design: the
# lengths or batch sizes of a packed sequence. Position of that argument / result.
_CPU_ARGUMENT = {
    _aten._pack_padded_sequence.default: 1,
    _aten._pad_packed_sequence.default: 1,
    _aten._pack_padded_sequence_backward.default: 2,
}
_CPU_RESULT = {_aten._pack_padded_sequence.default: 1}
# Indexing, reading and writing: CUDA takes index tensors and boolean masks on the
# CPU (argument 1, a list) as well as on the indexed tensor's device.
_INDEXING = {
    _aten.index.Tensor,
    _aten.index_put.default,
    _aten.index_put_.default,
    _aten._index_put_impl_.default,
    _aten._unsafe_index.Tensor,
    _aten._unsafe_index_put.default,
}


_devices: dict[int, torch.device] = {}  # torch.device("sim", i), made once

_NEW_TENSOR = torch.Tensor.new_tensor

# Inference mode (SimTensor.__new__): under ``torch.inference_mode()`` a view of a normal
# tensor is a normal tensor (its version counter is its base's); a wrapper made there would be
# an inference tensor, which PyTorch refuses to give the base's version counter. So the
# wrapper of a CPU tensor that is not an inference tensor is made outside inference mode.
_inference_mode = torch.is_inference_mode_enabled


# Composite operations that reach __torch_dispatch__ undecomposed under inference mode
# (no autograd step to decompose them first), answered on the wrappers themselves. Run
# on the CPU tensor, ``x.to("sim:1")`` would see a CPU-to-CPU no-op and give back ``x``
# itself (decomposed, it is a _to_copy), and module.to() would be told that a CPU and a
# simulated tensor can share ``.data``.
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
            _memory.track(data, index)
        return wrapper

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Above autograd, so a cast is recorded as on GPUs: autocast("sim")
        # follows CPU autocast's rules for the operations listed below.
        kwargs = kwargs or {}
        if torch.is_autocast_enabled(NAME):
            dtype = _AUTOCAST_TO.get(func)
            if dtype is not None:
                dtype = torch.get_autocast_dtype(NAME) if dtype == "low" else dtype
                args, kwargs = _cast((args, kwargs), dtype)
        if func in _HOOK_REGISTRARS and len(args) > 1:
            args = (args[0], _guarded_hook(args[1]), *args[2:])
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
        if _inference_mode() and func in _UNDECOMPOSED:  # see _UNDECOMPOSED
            return _UNDECOMPOSED[func](func, *args, **(kwargs or {}))
        plan = _plans.get(id(func)) or _plan(func)
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
                        # As CUDA: lists that span devices take a slower path, a device at a time.
                        return _foreach_per_device(func, args, kwargs, given)
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


# Tensor hooks run inside the autograd engine. When a Python hook raises, PyTorch
# unwinds with the Python error still set, and on the way out the device guard
# that PyTorch installs for a backend written in Python calls back into Python
# from a noexcept method, which then fails and ends the process. So a hook on a
# simulated tensor keeps the exception it raised and hands PyTorch a result that
# PyTorch refuses in C++ (no Python error set); `_patch_backward` then raises the
# hook's own exception from the backward call, which stops there as on GPUs.
_HOOK_REGISTRARS = {torch.Tensor.register_hook, torch.Tensor.register_post_accumulate_grad_hook}
_hook_error = threading.local()


def _rejected() -> torch.Tensor:
    # Hooks must return None or a tensor like their input: PyTorch's C++ check
    # refuses a 0-element CPU bool tensor without setting a Python error.
    return torch.empty(0, dtype=torch.bool)


def _guarded_hook(hook: Any) -> Any:
    @functools.wraps(hook)
    def run(*args: Any) -> Any:
        try:
            return hook(*args)
        except BaseException as error:
            if getattr(_hook_error, "error", None) is None:
                _hook_error.error = error
            return _rejected()

    return run


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


def _unwrap_arguments(args: tuple, plan: _Plan, given: dict, found: list) -> list:
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


# Autocast on simulated devices: CPU autocast's lists, for the common operations.
_F = torch.nn.functional
_LOW = [torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.addbmm, _F.linear]
_LOW += [torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm]
_LOW += [_F.conv1d, _F.conv2d, _F.conv3d, _F.conv_transpose1d, _F.conv_transpose2d]
_LOW += [_F.conv_transpose3d, _F.prelu, _F.scaled_dot_product_attention]
_FP32 = [_F.mse_loss, _F.cross_entropy, _F.nll_loss, _F.l1_loss, _F.smooth_l1_loss]
_FP32 += [_F.huber_loss, _F.kl_div, _F.binary_cross_entropy, _F.binary_cross_entropy_with_logits]
_AUTOCAST_TO: dict[Any, Any] = {f: "low" for f in _LOW} | {f: torch.float32 for f in _FP32}


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, SimTensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    if type(value) is list or type(value) is tuple:
        return type(value)(_cast(v, dtype) for v in value)
    if type(value) is dict:
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value


# Random operations without a ``generator`` argument, redone (as the CPU does
# them) with one: each takes (func, args, kwargs, generator).
def _dropout(func, args, kwargs, gen):
    input, p, train = (list(args) + [kwargs.get("p"), kwargs.get("train")])[:3]
    if not train or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool)
    mask = torch.empty_like(input, dtype=torch.bool).bernoulli_(1 - p, generator=gen)
    return input * mask * (1.0 / (1 - p)), mask


def _like(fill):
    def draw(func, args, kwargs, gen):
        self, *rest = args
        options = {k: kwargs[k] for k in ("dtype", "memory_format") if kwargs.get(k) is not None}
        return fill(torch.empty_like(self, **options), rest, gen)

    return draw


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """``_thnn_fused_lstm_cell``, the cell PyTorch's LSTM uses on accelerators (no CPU kernel)."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_hy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """``_thnn_fused_gru_cell``, the cell PyTorch's GRU uses on accelerators."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    i_r, i_z, i_n = input_gates.chunk(3, 1)
    h_r, h_z, h_n = hidden_gates.chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, h_n, hx], 1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, h_n, hx = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    biases = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return grad_input, grad_hidden, grad_hy * z, *biases


def _record_stream(tensor: torch.Tensor, stream: Any) -> None:
    """``record_stream`` (torch's Scatter calls it): no caching allocator to tell, no streams."""


# Accelerator-only operations, written out for the CPU tensors behind simulated ones.
_ACCELERATOR_ONLY = {
    _aten.record_stream.default: _record_stream,
    _aten._thnn_fused_gru_cell.default: _gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
    _aten._thnn_fused_lstm_cell.default: _lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
}

_RANDOM_WITHOUT_GENERATOR = {
    _aten.native_dropout: _dropout,
    _aten.randn_like: _like(lambda t, rest, gen: t.normal_(generator=gen)),
    _aten.rand_like: _like(lambda t, rest, gen: t.uniform_(generator=gen)),
    _aten.randint_like: _like(
        lambda t, rest, gen: t.random_(*(int(r) for r in rest), generator=gen)
    ),
}


class _Plan:
    """What `SimTensor.__torch_dispatch__` needs to know about one operation, worked out once."""

    __slots__ = (
        "func",
        "transfer",
        "cpu_argument",
        "cpu_result",
        "indexing",
        "foreach",
        "device",
        "generator",
        "draw",
        "kernel",
        "metadata_in_place",
        "view",
    )

    def __init__(self, func: Any) -> None:
        names = {a.name for a in func._schema.arguments}
        self.func = func  # kept alive, so its id() stays its own
        self.transfer = func in _TRANSFERS
        self.cpu_argument = _CPU_ARGUMENT.get(func)
        self.cpu_result = _CPU_RESULT.get(func)
        self.indexing = func in _INDEXING
        self.foreach = func.__name__.startswith("_foreach_")
        self.device = "device" in names
        self.generator = "generator" in names
        self.draw = _RANDOM_WITHOUT_GENERATOR.get(func.overloadpacket)
        self.kernel = _ACCELERATOR_ONLY.get(func, func)
        self.metadata_in_place = func.overloadpacket in _METADATA_IN_PLACE
        # A view shares its input's storage, already counted: no memory tracking needed.
        returns = func._schema.returns
        self.view = bool(returns) and returns[0].alias_info is not None


_plans: dict[int, _Plan] = {}


def _plan(func: Any) -> _Plan:
    plan = _plans[id(func)] = _Plan(func)
    return plan


def _foreach_per_device(func: Any, args: tuple, kwargs: dict, given: dict) -> Any:
    """A foreach operation over lists that span devices, run once per device, as CUDA does."""
    lists = [i for i, a in enumerate(args) if type(a) in (list, tuple) and len(a) == len(args[0])]
    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(args[0]):
        groups.setdefault(t.device, []).append(i)
    kwargs = {k: given.get(id(v), v) for k, v in kwargs.items()}  # wrapped again
    results: list[Any] = [None] * len(args[0])
    for picked in groups.values():
        part = [[a[i] for i in picked] if n in lists else a for n, a in enumerate(args)]
        out = func(*part, **kwargs)
        for i, r in zip(picked, out or ()):
            results[i] = r
    return results if func._schema.returns else None  # in-place ones return nothing


def _load_payload(storage: Any, location: str) -> Any:
    """Where torch.load puts a storage that ``map_location`` sends to a simulated device.

    A simulated tensor is saved as a CPU tensor and its device (`SimTensor.__reduce_ex__`),
    and rebuilt from it on the mapped device: the CPU storage underneath stays on the CPU.
    """
    if location == NAME or location.startswith(NAME + ":"):
        return storage
    return None  # not ours: PyTorch's own rules


# How files saved by earlier versions (torch.load(..., weights_only=False)) rebuild their tensors.
def _rebuild(data: torch.Tensor, index: int, requires_grad: bool) -> SimTensor:
    enable()
    return SimTensor(data, index).requires_grad_(requires_grad)


# --------------------------------------------------------------------------
# Kernels for the sim device type: tensors *created* on a simulated device
# --------------------------------------------------------------------------


def _index_of(device: torch.device | None) -> int:
    return device_index(device)


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    data = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return SimTensor(data, _index_of(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return SimTensor(
        torch.empty_strided(size, stride, dtype=dtype, layout=layout), _index_of(device)
    )


def _factory(op):
    """A kernel that builds the tensor on the CPU and puts it on the simulated device."""

    def kernel(*args, **kwargs):
        index = _index_of(kwargs.pop("device", None))
        kwargs.pop("pin_memory", None)
        return SimTensor(op(*args, **kwargs), index)

    return kernel


# Factories whose generic kernel resizes an empty tensor in place, which a
# wrapper cannot follow: these get kernels of their own.
_FACTORIES = ["arange", "arange.start", "arange.start_step", "linspace", "logspace", "eye", "eye.m"]


def _pin_memory(self: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    # DataLoader(pin_memory=True) pins for the current accelerator, now sim;
    # host memory is all one kind here, so a pinned copy is a plain copy.
    return self.clone()


def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False):
    source = self._data if isinstance(self, SimTensor) else self
    dst._data.copy_(source)
    return dst


# --------------------------------------------------------------------------
# The device module: torch.sim.device_count(), torch.sim.manual_seed_all() ...
# --------------------------------------------------------------------------


class _DeviceModule:
    """What PyTorch asks a backend for (``torch.sim``), answered for simulated devices."""

    _initialized = True  # what torch.utils.checkpoint asks before saving the devices' states

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return _device_count()

    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    device = device

    @staticmethod
    def manual_seed(seed: int) -> None:
        generator(current_device()).manual_seed(int(seed))

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        simulated_random.manual_seed_all(seed)  # as CUDA: every device gets the same seed

    @staticmethod
    def initial_seed() -> int:
        return generator(current_device()).initial_seed()

    # What torch.random.fork_rng and torch.utils.checkpoint save and restore.
    @staticmethod
    def get_rng_state(device: DeviceArg = NAME) -> torch.Tensor:
        return generator(device_index(device)).get_state()

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: DeviceArg = NAME) -> None:
        generator(device_index(device)).set_state(new_state)

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        return [generator(i).get_state() for i in range(_device_count())]

    @staticmethod
    def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            generator(i).set_state(state)

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Nothing to wait for: every simulated operation has finished when it returns."""

    memory_allocated = staticmethod(memory_allocated)
    max_memory_allocated = staticmethod(max_memory_allocated)
    reset_peak_memory_stats = staticmethod(reset_peak_memory_stats)


# --------------------------------------------------------------------------
# Registration, once, the first time simulated devices are used
# --------------------------------------------------------------------------

_enabled = threading.Lock()
_library: list[torch.library.Library] = []


def enable() -> None:
    """Register the ``sim`` device type with PyTorch (idempotent, cheap after the first call)."""
    if _library:
        return
    with _enabled:
        if _library:
            return
        try:  # added in torch 2.9: a device type implemented in Python
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
        except ImportError:
            raise RuntimeError(
                f"Simulated devices need torch 2.9 or newer (this is torch "
                f"{torch.__version__}): upgrade torch, or run on GPUs."
            ) from None

        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise RuntimeError(
                f"Cannot simulate devices: PyTorch's extra device type is already "
                f"taken by {current!r} in this process."
            )
        if current != NAME:
            _setup_privateuseone_for_python_backend(NAME, backend_module=_DeviceModule())
        library = torch.library.Library("aten", "IMPL")
        library.impl("empty.memory_format", _empty, "PrivateUse1")
        library.impl("empty_strided", _empty_strided, "PrivateUse1")
        library.impl("_copy_from", _copy_from, "PrivateUse1")
        with warnings.catch_warnings():  # replacing the CPU kernel is the point
            warnings.simplefilter("ignore")
            library.impl("_pin_memory", _pin_memory, "CPU")
        for name in _FACTORIES:
            packet, _, overload = name.partition(".")
            op = getattr(getattr(_aten, packet), overload or "default")
            library.impl(name, _factory(op), "PrivateUse1")
        # Autocast is applied in SimTensor.__torch_function__; the dispatcher's
        # autocast step for this device type has nothing left to do.
        autocast = torch.library.Library("_", "IMPL")
        autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
        _patch_backward()
        simulated_grads.install()
        simulated_random.install()
        torch.serialization.register_package(15, lambda storage: None, _load_payload)
        _install_torch_collectives()
        _patch_swap_tensors()
        _library.extend([library, autocast])


def _install_torch_collectives() -> None:
    """Let torch's own DataParallel run here too: see `learn_parallel.simulated_comm`."""
    from learn_parallel import simulated_comm

    simulated_comm.install()


def _patch_backward() -> None:
    """Run backward passes on the calling thread.

    PyTorch's autograd engine gives every device index of an accelerator its
    own worker thread, sized by the number of devices the backend reports; a
    backend registered from Python reports one. Turning the engine's
    per-device threads off for a backward pass (`set_multithreading_enabled`)
    runs it on the calling thread instead, which is where CPU work runs anyway.
    """
    import torch.autograd.graph as graph

    original = graph._engine_run_backward

    def run_backward(outputs: Any, grads: Any = None, *args: Any, **kwargs: Any) -> Any:
        grads = simulated_grads.check_given(outputs, grads)  # the engine skips subclasses
        outer, _hook_error.error = getattr(_hook_error, "error", None), None
        try:
            with torch.autograd.set_multithreading_enabled(False):
                return original(outputs, grads, *args, **kwargs)
        except RuntimeError:
            error = _hook_error.error
            if error is None:
                raise
            raise error.with_traceback(error.__traceback__) from None  # a hook raised it
        finally:
            _hook_error.error = outer  # a backward inside a hook leaves the outer one's alone

    graph._engine_run_backward = run_backward
    torch.autograd._engine_run_backward = run_backward


def _patch_swap_tensors() -> None:
    """``module.to("sim:2")`` while an autograd graph still holds a weight: a clear refusal.

    PyTorch moves the parameters of a tensor subclass with `torch.utils.swap_tensors`
    (on GPUs ``param.data = moved`` is used instead, and a live graph keeps the storage
    it saved). The swap refuses a tensor that a graph has saved, with a message about
    use counts, and poisons the graph of one that only a gradient accumulator holds; a
    backward pass over simulated tensors that meets such a poisoned node ends the
    process. So any graph that holds a simulated tensor, or has saved one that is moved
    onto a simulated device, makes the move fail here, saying how to free the graph.
    """
    import torch.utils

    original = torch.utils.swap_tensors

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        uses = t1._use_count()
        saved = uses > 2 or (uses == 2 and not t1.is_leaf)
        if (saved and isinstance(t2, SimTensor)) or (uses > 1 and isinstance(t1, SimTensor)):
            raise RuntimeError(
                f"Cannot move a {tuple(t1.shape)} tensor from {t1.device} to {t2.device} "
                f"while an autograd graph holds it (on GPUs the move works and the old graph "
                f"keeps the old storage; simulated devices cannot do that). Free the graph "
                f"first: call backward() on the output if you need its gradients, `del` the "
                f"outputs and losses that hold the graph, then module.to('{t2.device}') "
                f"again (submodules before this one may have moved already)."
            )
        original(t1, t2)

    swap_tensors.__wrapped__ = original  # type: ignore[attr-defined]
    torch.utils.swap_tensors = swap_tensors
