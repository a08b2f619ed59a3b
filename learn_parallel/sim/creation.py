"""The kernels that make a tensor on a simulated device: where every `SimTensor` is born.

``torch.empty(3, device="sim:1")``, ``x.to("sim:1")`` and the factories below reach these
kernels through PyTorch's dispatch key for out-of-tree backends (``PrivateUse1``, which
`learn_parallel.sim.backend` names ``sim``), and ``torch.load(f, map_location="sim:1")``
reaches `load_payload`; every other tensor on a simulated device comes from an operation
on one made here. So the first of them to run is the simulator's first use: it installs
the rest (`learn_parallel.sim.patches.install`, cheap afterwards).
"""

from __future__ import annotations

from typing import Any

import torch

from learn_parallel.sim import patches
from learn_parallel.sim.device_ids import NAME, device_index
from learn_parallel.sim.tensor import SimTensor

_aten = torch.ops.aten


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    patches.install()
    data = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return SimTensor(data, device_index(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    patches.install()
    data = torch.empty_strided(size, stride, dtype=dtype, layout=layout)
    return SimTensor(data, device_index(device))


def _factory(op: Any) -> Any:
    """A kernel that builds the tensor on the CPU and puts it on the simulated device."""

    def kernel(*args, **kwargs):
        patches.install()
        index = device_index(kwargs.pop("device", None))
        kwargs.pop("pin_memory", None)
        return SimTensor(op(*args, **kwargs), index)

    return kernel


def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False):
    source = self._data if isinstance(self, SimTensor) else self
    dst._data.copy_(source)
    return dst


def load_payload(storage: Any, location: str) -> Any:
    """Where torch.load puts a storage that ``map_location`` sends to a simulated device.

    A simulated tensor is saved as a CPU tensor and its device (`SimTensor.__reduce_ex__`),
    and rebuilt from it on the mapped device: the CPU storage underneath stays on the CPU.
    """
    if location == NAME or location.startswith(NAME + ":"):
        patches.install()
        return storage
    return None  # not ours: PyTorch's own rules


# Factories whose generic kernel resizes an empty tensor in place, which a
# wrapper cannot follow: these get kernels of their own.
_FACTORIES = ["arange", "arange.start", "arange.start_step", "linspace", "logspace", "eye", "eye.m"]


def register() -> list[torch.library.Library]:
    """Register these kernels for the ``sim`` device type (``PrivateUse1``), and
    `load_payload` with ``torch.serialization``; the registrations live as long as the
    libraries returned."""
    torch.serialization.register_package(15, lambda storage: None, load_payload)
    library = torch.library.Library("aten", "IMPL")
    library.impl("empty.memory_format", _empty, "PrivateUse1")
    library.impl("empty_strided", _empty_strided, "PrivateUse1")
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    for name in _FACTORIES:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(_aten, packet), overload or "default")
        library.impl(name, _factory(op), "PrivateUse1")
    # Autocast is applied in SimTensor.__torch_function__; the dispatcher's
    # autocast step for this device type has nothing left to do.
    autocast = torch.library.Library("_", "IMPL")
    autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    return [library, autocast]
