"""Random numbers on simulated devices: one generator per device, as CUDA has.

- ``torch.manual_seed(s)`` seeds every simulated device with ``s``, as it seeds
  every GPU, so two devices with the same seed draw the same numbers.
- A device's numbers are not the CPU's: a GPU's generator (Philox) is another
  algorithm than the CPU's (Mersenne Twister), so code that compares a CPU
  reference with devices through dropout fails on GPUs. Each simulated device
  draws from a CPU generator seeded with a fixed mix of the seed, which gives
  the same effect: another stream for the same seed.
- ``torch.Generator(device="sim:1")`` makes a generator of a simulated device
  (`SimGenerator`), and random operations on a simulated device refuse a CPU
  generator, as CUDA refuses one.
- ``get_rng_state`` / ``set_rng_state`` per device: what ``torch.random.fork_rng``
  and ``torch.utils.checkpoint`` use to replay dropout in a recomputed forward.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from learn_parallel.sim.device_ids import NAME, device_index

_MIX = 0x9E3779B97F4A7C15  # odd: seed -> seed * _MIX + 1 changes every seed (mod 2**32 too)

_last_seed: list[int] = []  # the last seed given to every device, if any
_devices: dict[int, SimGenerator] = {}  # each device's default generator
_simulated: dict[int, int] = {}  # C++ address of every simulated generator -> its device


def _cpu_seed(seed: int) -> int:
    return (int(seed) * _MIX + 1) % 2**64


class SimGenerator(torch._C.Generator):
    """The generator of simulated device ``sim:index``: a CPU generator on a stream of its own."""

    _index: int
    _seed: int

    def __new__(cls, index: int) -> SimGenerator:
        gen = super().__new__(cls)
        gen._index = index
        # As CUDA's: a torch.manual_seed made before the devices existed still applies
        # (CUDA queues it until it initialises); the CPU's initial seed remembers it.
        gen.manual_seed(_last_seed[-1] if _last_seed else torch.initial_seed())
        # Random operations receive a new Python object for the same generator:
        # the C++ address is what tells a simulated device's generator apart.
        _simulated[gen._cdata] = index
        weakref.finalize(gen, _simulated.pop, gen._cdata, None)
        return gen

    def __init__(self, index: int) -> None:
        pass  # all done in __new__

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(NAME, self._index)

    def manual_seed(self, seed: int) -> SimGenerator:  # type: ignore[override]
        super().manual_seed(_cpu_seed(seed))
        self._seed = int(seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        seed = super().seed()  # a fresh, non-deterministic seed
        self.manual_seed(seed)
        return seed

    def __reduce__(self) -> tuple:
        return (_rebuild_generator, (self._index, self._seed, self.get_state()))


def _rebuild_generator(index: int, seed: int, state: torch.Tensor) -> SimGenerator:
    gen = SimGenerator(index).manual_seed(seed)
    gen.set_state(state)
    return gen


def generator(index: int) -> SimGenerator:
    """The default random generator of ``sim:index`` (created on first use)."""
    gen = _devices.get(index)
    if gen is None:
        gen = _devices.setdefault(index, SimGenerator(index))
    return gen


def manual_seed_all(seed: int) -> None:
    """Seed every simulated device alike, as ``torch.cuda.manual_seed_all`` seeds every GPU."""
    _last_seed[:] = [int(seed)]
    for gen in _devices.values():
        gen.manual_seed(seed)


def draws_from(given: Any, index: int) -> torch.Generator:
    """The generator a random operation on ``sim:index`` uses: the device's, or the one given.

    CUDA refuses a generator of another device type (a CPU one) with this error.
    """
    if given is None:
        return generator(index)
    if given._cdata not in _simulated:
        raise RuntimeError(
            f"Expected a '{NAME}' device type for generator but found '{given.device.type}'. "
            f"Make one with torch.Generator(device='{NAME}:{index}'), or leave generator out."
        )
    return given


class _GeneratorType(type(torch._C.Generator)):  # type: ignore[misc]
    """``torch.Generator`` with simulated devices: every generator still passes isinstance."""

    def __call__(cls, device: Any = "cpu") -> torch.Generator:
        where = torch.device("cpu" if device is None else device)
        if where.type != NAME:
            return torch._C.Generator(where)
        return SimGenerator(device_index(where))

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, torch._C.Generator)


class Generator(torch._C.Generator, metaclass=_GeneratorType):
    """What ``torch.Generator`` becomes once simulated devices are in use (see `install`)."""


def install() -> None:
    """Let ``torch.Generator(device="sim:i")`` make a simulated device's generator.

    PyTorch asks a C++ backend for new generators; one written in Python cannot
    answer, so ``torch.Generator`` is replaced by a class that answers for ``sim``
    and hands every other device to PyTorch's own.
    """
    torch.Generator = Generator  # type: ignore[misc]
