"""torch's own DataParallel on simulated devices: its collectives given a ``sim`` path.

`install` puts the functions of `learn_parallel.sim.comm` in place of
``torch.nn.parallel.comm``'s (and ``torch.cuda.comm``'s, the same functions).
It runs at the simulator's first use (`learn_parallel.sim.patches`), so nothing is
replaced in a process that never uses a simulated device. NCCL cannot be given a simulated path:
``torch.cuda.nccl``'s collectives raise an error that names the alternative on
simulated tensors, and ``nccl.is_available`` answers False for them (as it does
for any tensor NCCL cannot take), so ``reduce_add`` takes torch's own
device-to-device path, which needs nothing from C++.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from learn_parallel.sim import comm as sim_comm
from learn_parallel.sim.comm import COMM_NAMES, ORIGINALS, any_sim
from learn_parallel.sim.device_ids import NAME, simulation_forced

NCCL_NAMES = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter")
_installed = threading.Lock()

_NO_NCCL = (
    "torch.cuda.nccl.{what} needs CUDA tensors and NCCL; it cannot run on simulated "
    "devices. Use torch.nn.parallel.comm ({alternative}), which has a simulated path, "
    "or learn_parallel's own collectives."
)
_NCCL_ALTERNATIVE = {
    "all_reduce": "reduce_add, then broadcast",
    "reduce": "reduce_add",
    "broadcast": "broadcast",
    "all_gather": "gather, then broadcast",
    "reduce_scatter": "reduce_add, then scatter",
}


def _nccl_refusing(name: str) -> Callable[..., Any]:
    original = ORIGINALS["nccl." + name]

    def refuse(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if any_sim(inputs):
            raise RuntimeError(_NO_NCCL.format(what=name, alternative=_NCCL_ALTERNATIVE[name]))
        return original(inputs, *args, **kwargs)

    refuse.__wrapped__ = original  # type: ignore[attr-defined]
    return refuse


def _nccl_is_available(tensors: Any) -> bool:
    tensors = list(tensors)
    if any_sim(tensors):
        return False  # NCCL takes CUDA tensors only; callers then copy device to device
    return ORIGINALS["nccl.is_available"](tensors)


def install() -> None:
    """Give torch's collectives their simulated path (once; see `learn_parallel.sim.patches`)."""
    import torch.cuda.comm as cuda_comm
    import torch.cuda.nccl as nccl
    import torch.nn.parallel.comm as comm

    with _installed:
        if ORIGINALS:
            return
        ours = {name: getattr(sim_comm, name) for name in COMM_NAMES}
        for name in COMM_NAMES:
            ORIGINALS[name] = getattr(comm, name)
            ours[name].__wrapped__ = ORIGINALS[name]  # type: ignore[attr-defined]
        for name in ("is_available", *NCCL_NAMES):
            ORIGINALS["nccl." + name] = getattr(nccl, name)
        for name, function in ours.items():
            setattr(comm, name, function)
            setattr(cuda_comm, name, function)  # the same functions, re-exported there
        nccl.is_available = _nccl_is_available
        for name in NCCL_NAMES:
            setattr(nccl, name, _nccl_refusing(name))
        _prefer_simulated_devices()


def _prefer_simulated_devices() -> None:
    """Where ours simulates but torch's DataParallel would pick CUDA (simulation forced on a GPU
    machine: the chapters on one GPU) or MPS (an Apple-silicon Mac, where it would then just
    call the module), make it pick ``sim`` as ours does. Decided at each call, so setting
    ``LEARN_PARALLEL_SIMULATE`` later still counts."""
    import importlib

    # the module, not torch.nn.parallel's function of the same name
    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")

    device_type = data_parallel._get_available_device_type
    all_indices = data_parallel._get_all_device_indices

    def forced() -> bool:
        cuda = torch.cuda.is_available()
        ours_simulate = simulation_forced() or not cuda  # devices.device_type's rule (below it)
        return ours_simulate and (cuda or torch.backends.mps.is_available())

    data_parallel._get_available_device_type = lambda: NAME if forced() else device_type()
    data_parallel._get_all_device_indices = lambda: (
        list(range(torch.sim.device_count())) if forced() else all_indices()
    )
