"""Simulated devices: ``sim:0``, ``sim:1`` ... that fail where GPUs fail.

Without GPUs, every simulated device is backed by the CPU. PyTorch's device type for
out-of-tree backends (``PrivateUse1``) is named ``sim``, so ``x.to("sim:1")`` and
``module.to("sim:0")`` are ordinary PyTorch calls; a tensor there is a `SimTensor`, a
wrapper around a CPU tensor whose ``__torch_dispatch__`` refuses to mix devices as CUDA
does. Where no GPU is visible, importing learn_parallel registers ``sim`` at once (its
name, device module and kernels: `backend`), and the rest of the simulator waits for the
first use (`patches` lists every change to torch, when and why). On a machine with a GPU
nothing is registered until simulated devices are used (``lp.first_device()`` with
``LEARN_PARALLEL_SIMULATE=1``, or `enable`), because CUDA's backward then fails.

The devices chapter (book/devices.ipynb) explains how they work, and its one table says
what they model and what they do not (bandwidth, kernel timing, streams).
"""

from learn_parallel.sim.backend import enable, register_without_gpus
from learn_parallel.sim.device_ids import (
    DEFAULT_SIMULATED_DEVICES,
    NAME,
    SIMULATE_ENV,
    SIMULATED_DEVICES_ENV,
    device_count,
    simulation_forced,
)
from learn_parallel.sim.memory import (
    max_memory_allocated,
    memory_allocated,
    reset_peak_memory_stats,
)
from learn_parallel.sim.tensor import SimTensor

__all__ = [
    "DEFAULT_SIMULATED_DEVICES",
    "NAME",
    "SIMULATE_ENV",
    "SIMULATED_DEVICES_ENV",
    "SimTensor",
    "device_count",
    "enable",
    "max_memory_allocated",
    "memory_allocated",
    "register_without_gpus",
    "reset_peak_memory_stats",
    "simulation_forced",
]

register_without_gpus()  # no GPU: "sim:1" works from the first line (see the docstring)
