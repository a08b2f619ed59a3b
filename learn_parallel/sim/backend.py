"""Registering the ``sim`` device type with PyTorch: its name, device module and kernels.

`register` names PyTorch's device type for out-of-tree backends (``PrivateUse1``) ``sim``,
hands PyTorch the device module it asks a backend for (``torch.sim``: device count,
current device, seeds and random states, memory counters) and registers the kernels that
*make* tensors on a simulated device, ``torch.load``'s too (`learn_parallel.sim.creation`),
and lets lazy modules move there. That is all that importing learn_parallel does on a
machine without GPUs (`register_without_gpus`), so ``x.to("sim:1")`` works from the first
line; the rest waits for the first use (`learn_parallel.sim.patches` lists it all).
`enable` does both, at once.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

from learn_parallel.sim import creation, generators, lazy, patches
from learn_parallel.sim.device_ids import (
    NAME,
    DeviceArg,
    current_device,
    device,
    device_count,
    device_index,
    set_device,
)
from learn_parallel.sim.generators import generator
from learn_parallel.sim.memory import (
    max_memory_allocated,
    memory_allocated,
    reset_peak_memory_stats,
)

# --------------------------------------------------------------------------
# The device module: torch.sim.device_count(), torch.sim.manual_seed_all() ...
# --------------------------------------------------------------------------


def _a_use(function: Any) -> Any:
    """``function`` of torch.sim, which installs the rest of the simulator first: calling
    it is using simulated devices."""

    @functools.wraps(function)
    def used(*args: Any, **kwargs: Any) -> Any:
        patches.install()
        return function(*args, **kwargs)

    return staticmethod(used)


class _DeviceModule:
    """What PyTorch asks a backend for (``torch.sim``), answered for simulated devices.

    Until the first use, it answers as a machine without accelerator: torch asks it from
    CPU-only code too (``torch.accelerator.is_available()``, ``torch.manual_seed``).
    """

    _initialized = True  # what torch.utils.checkpoint asks before saving the devices' states

    @staticmethod
    def _lazy_init() -> None:
        """What torch calls before it first makes a tensor on ``sim`` (as for CUDA)."""
        patches.install()

    @staticmethod
    def is_available() -> bool:
        return patches.installed()

    @staticmethod
    def is_initialized() -> bool:
        return patches.installed()

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return device_count() if patches.installed() else 0

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        generators.manual_seed_all(seed)  # as CUDA: every device gets the same seed

    current_device = _a_use(current_device)
    set_device = _a_use(set_device)
    device = _a_use(device)

    @_a_use
    def manual_seed(seed: int) -> None:
        generator(current_device()).manual_seed(int(seed))

    @_a_use
    def initial_seed() -> int:
        return generator(current_device()).initial_seed()

    # What torch.random.fork_rng and torch.utils.checkpoint save and restore.
    @_a_use
    def get_rng_state(device: DeviceArg = NAME) -> torch.Tensor:
        return generator(device_index(device)).get_state()

    @_a_use
    def set_rng_state(new_state: torch.Tensor, device: DeviceArg = NAME) -> None:
        generator(device_index(device)).set_state(new_state)

    @_a_use
    def get_rng_state_all() -> list[torch.Tensor]:
        return [generator(i).get_state() for i in range(device_count())]

    @_a_use
    def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            generator(i).set_state(state)

    @_a_use
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @_a_use
    def synchronize(device: Any = None) -> None:
        """Nothing to wait for: every simulated operation has finished when it returns."""

    memory_allocated = _a_use(memory_allocated)
    max_memory_allocated = _a_use(max_memory_allocated)
    reset_peak_memory_stats = _a_use(reset_peak_memory_stats)


# --------------------------------------------------------------------------
# Registration: the name and the kernels (at import without GPUs), or everything
# --------------------------------------------------------------------------

_registering = threading.Lock()
_library: list[torch.library.Library] = []


def register() -> None:
    """Make ``sim`` a device type PyTorch parses and dispatches to (once; see `patches`)."""
    if _library:
        return
    with _registering:
        if _library:
            return
        if not _python_backends():
            raise RuntimeError(
                f"Simulated devices need torch 2.9 or newer (this is torch "
                f"{torch.__version__}): upgrade torch, or run on GPUs."
            )
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise RuntimeError(
                f"Cannot simulate devices: PyTorch's extra device type is already "
                f"taken by {current!r} in this process."
            )
        if current != NAME:
            _name_the_device_type()
        lazy.install()  # before any use: a lazy module's move can be the first one
        _library.extend(creation.register())


def _python_backends() -> bool:
    """Whether this torch takes a device type written in Python (added in torch 2.9)."""
    from torch.utils import backend_registration as helper

    return hasattr(helper, "_setup_privateuseone_for_python_backend")


def _name_the_device_type() -> None:
    """What torch's helper for backends written in Python does, in its order, less the
    methods it generates on ``torch.Tensor`` and ``nn.Module`` (``x.sim()``), which wait
    for the first use (`patches`)."""
    from torch.utils import backend_registration as helper

    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _DeviceModule())
    torch._C._acc.register_python_privateuseone_hook(helper._DummyPrivateUse1Hook())
    torch._C._acc.register_python_privateuseone_device_guard(helper._DummyDeviceGuard())


def enable() -> None:
    """Register ``sim`` and install the whole simulator (idempotent, cheap after the first call).

    Called wherever simulated devices are used (``lp.Device("sim", 0).torch_device``).
    """
    register()
    patches.install()


def register_without_gpus() -> bool:
    """Register ``sim`` now if this machine shows no GPU; True if it is registered.

    Importing learn_parallel calls this, so that ``x.to("sim:1")`` works from the first
    line. Where a GPU is visible, nothing is registered until simulated devices are first
    used: after that, torch takes ``sim`` for its accelerator and backward on CUDA tensors
    fails in that process (see `learn_parallel.sim.grads`). Nothing is registered either
    where another backend holds PyTorch's extra device type, or torch is older than 2.9.
    """
    if _library:
        return True
    free = torch._C._get_privateuse1_backend_name() == "privateuseone"
    # device_count() asks NVML first: no CUDA initialised, forked children unharmed.
    if torch.cuda.device_count() > 0 or not free or not _python_backends():
        return False
    register()
    return True
