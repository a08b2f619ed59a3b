"""Registering the ``sim`` device type with PyTorch: on import without GPUs, else on first use.

`enable` names PyTorch's device type for out-of-tree backends (``PrivateUse1``) ``sim``,
hands PyTorch the device module it asks a backend for (``torch.sim``: device count,
current device, seeds and random states, memory counters), registers the kernels that
*create* tensors on a simulated device, and installs the rest of the simulator: the
autograd patches (`learn_parallel.sim.grads`), the per-device generators
(`learn_parallel.sim.generators`), lazy modules (`learn_parallel.sim.lazy`), the current
device (`learn_parallel.sim.device_ids`), ``torch.save``/``torch.load`` support, torch's
own collectives (`learn_parallel.sim.torch_parallel`) and a clear refusal to move a
tensor an autograd graph still holds. Without a GPU, importing the package calls it
(`enable_without_gpus`).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import torch

from learn_parallel.sim import generators, grads, lazy, torch_parallel
from learn_parallel.sim.device_ids import (
    NAME,
    DeviceArg,
    current_device,
    device,
    device_count,
    device_index,
    follow_current_device,
    set_device,
)
from learn_parallel.sim.generators import generator
from learn_parallel.sim.memory import (
    max_memory_allocated,
    memory_allocated,
    reset_peak_memory_stats,
)
from learn_parallel.sim.tensor import SimTensor

_aten = torch.ops.aten


# --------------------------------------------------------------------------
# Kernels for the sim device type: tensors *created* on a simulated device
# --------------------------------------------------------------------------


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    data = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return SimTensor(data, device_index(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return SimTensor(
        torch.empty_strided(size, stride, dtype=dtype, layout=layout), device_index(device)
    )


def _factory(op):
    """A kernel that builds the tensor on the CPU and puts it on the simulated device."""

    def kernel(*args, **kwargs):
        index = device_index(kwargs.pop("device", None))
        kwargs.pop("pin_memory", None)
        return SimTensor(op(*args, **kwargs), index)

    return kernel


# Factories whose generic kernel resizes an empty tensor in place, which a
# wrapper cannot follow: these get kernels of their own.
_FACTORIES = ["arange", "arange.start", "arange.start_step", "linspace", "logspace", "eye", "eye.m"]


_COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd  # where torch's own kernel stays


def _pin_memory(self: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Pinning a CPU tensor (``DataLoader(pin_memory=True)`` too) with ``sim`` registered.

    torch pins for the current accelerator, now ``sim``, which has no pinned memory. Where
    a GPU exists, pin for it with torch's own kernel, so copies to it stay asynchronous;
    without one, host memory is all one kind, and a pinned copy is a plain copy.
    """
    if device is None or torch.device(device).type == NAME:
        if not torch.cuda.is_available():
            return self.clone()
        device = torch.device("cuda")
    return _aten._pin_memory.default._op_dk(_COMPOSITE, self, device)


def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False):
    source = self._data if isinstance(self, SimTensor) else self
    dst._data.copy_(source)
    return dst


def _load_payload(storage: Any, location: str) -> Any:
    """Where torch.load puts a storage that ``map_location`` sends to a simulated device.

    A simulated tensor is saved as a CPU tensor and its device (`SimTensor.__reduce_ex__`),
    and rebuilt from it on the mapped device: the CPU storage underneath stays on the CPU.
    """
    if location == NAME or location.startswith(NAME + ":"):
        return storage
    return None  # not ours: PyTorch's own rules


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
        return device_count()

    current_device = staticmethod(current_device)
    set_device = staticmethod(set_device)
    device = device

    @staticmethod
    def manual_seed(seed: int) -> None:
        generator(current_device()).manual_seed(int(seed))

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        generators.manual_seed_all(seed)  # as CUDA: every device gets the same seed

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
        return [generator(i).get_state() for i in range(device_count())]

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
        grads.patch_backward()
        grads.install()
        generators.install()
        lazy.install()
        follow_current_device()
        torch.serialization.register_package(15, lambda storage: None, _load_payload)
        torch_parallel.install()  # torch's own DataParallel runs here too
        _patch_swap_tensors()
        _library.extend([library, autocast])


def enable_without_gpus() -> bool:
    """Register ``sim`` now if this machine shows no GPU; True if it is registered.

    Importing learn_parallel calls this, so that ``x.to("sim:1")`` works from the first
    line. Where a GPU is visible, nothing is registered until simulated devices are first
    used: after that, torch takes ``sim`` for its accelerator and backward on CUDA tensors
    fails in that process (see `learn_parallel.sim.grads`). Nothing is registered either
    where another backend holds PyTorch's extra device type, or torch is older than 2.9.
    """
    import torch.utils.backend_registration as registration

    if _library:
        return True
    free = torch._C._get_privateuse1_backend_name() == "privateuseone"
    python_backends = hasattr(registration, "_setup_privateuseone_for_python_backend")
    # device_count() asks NVML first: no CUDA initialised, forked children unharmed.
    if torch.cuda.device_count() > 0 or not free or not python_backends:
        return False
    enable()
    return True


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
