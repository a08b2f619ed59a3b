"""Simulated devices: ``sim:0``, ``sim:1`` ... that fail where GPUs fail.

Without GPUs, every simulated device is backed by the CPU. What makes them
*distinct* devices is a thin layer in pure Python:

- PyTorch reserves one device type for out-of-tree backends (``PrivateUse1``).
  We name it ``sim`` (`enable`, in `learn_parallel.sim.backend`), so
  ``torch.device("sim", 1)``, ``x.to("sim:1")`` and ``module.to("sim:0")`` are
  ordinary PyTorch calls; how many devices there are is this package's to say
  (`device_count`, in `learn_parallel.sim.device_ids`).
- A tensor on ``sim:i`` is a `SimTensor` (`learn_parallel.sim.tensor`): a wrapper
  that reports device ``sim:i`` and holds a plain CPU tensor. Every operation on
  it reaches `SimTensor.__torch_dispatch__` *below* autograd, which checks that
  all its tensors sit on one simulated device (or are CPU scalars, which CUDA also
  accepts), runs the operation on the CPU tensors and wraps the results on that
  device. Mixing ``sim:0`` and ``sim:1``, or ``sim:0`` and a CPU tensor, raises
  the error a GPU raises; what CUDA lets the CPU give (index tensors and masks,
  packed-sequence lengths) it lets through (`learn_parallel.sim.ops`), and the
  kernels the CPU lacks (LSTM and GRU cells) are written out
  (`learn_parallel.sim.kernels`).
- Moving between devices (``to``, ``copy_``) always copies, and only to a
  device that exists; ``torch.sim.set_device`` picks what ``"sim"`` means.
- Each device has its own random generator, seeded by ``torch.manual_seed``
  exactly as CUDA seeds every GPU: all with the same seed, on a stream that is
  not the CPU's (`learn_parallel.sim.generators`).
- A gradient on the wrong device is refused, as the autograd engine refuses
  one on GPUs (`learn_parallel.sim.grads`).
- ``torch.save`` / ``torch.load`` (``map_location`` too) work as for CUDA tensors.
- Each device counts the bytes of the tensors that live on it, with a peak
  that can be reset (`memory_allocated`, `max_memory_allocated`).
- ``torch.autocast("sim")`` applies CPU autocast's rules to the common
  operations (matrix products, convolutions, ``linear``; losses in float32).
- torch's own ``DataParallel`` runs on them too: ``torch.nn.parallel.comm``'s
  collectives get a Python path (`learn_parallel.sim.comm`).

What this does not model: bandwidth (a copy costs a CPU memcpy), kernel
timing (every device computes on the same CPU cores, so their timings are
host clocks), asynchronous execution and streams (every operation finishes
before the next starts), device memory limits and the caching allocator.

Nothing here is registered until simulated devices are first used
(`enable`), so importing the package on a GPU machine changes nothing.
"""

from learn_parallel.sim.backend import enable
from learn_parallel.sim.device_ids import (
    DEFAULT_SIMULATED_DEVICES,
    NAME,
    SIMULATED_DEVICES_ENV,
    device_count,
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
    "SIMULATED_DEVICES_ENV",
    "SimTensor",
    "device_count",
    "enable",
    "max_memory_allocated",
    "memory_allocated",
    "reset_peak_memory_stats",
]
