"""Which devices DataParallel runs on: real GPUs, or simulated devices on the CPU.

Everything else in the package talks about devices through the small `Device`
value defined here, so the rest of the code never has to ask "is this a real
GPU?" more than once.

With CUDA available, integer ids name GPUs. Without it, integer ids name
*simulated* devices ``sim:0``, ``sim:1`` ...: PyTorch devices of their own
(`learn_parallel.sim`), so mixing two of them in one operation fails as
it does on GPUs, but backed by the CPU: they share the machine's memory and
cores. Everything that prints a simulated device says so (the devices chapter,
``book/devices.ipynb``, lists what they model and what they do not).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from learn_parallel import sim
from learn_parallel.sim import SIMULATED_DEVICES_ENV

# As code objects name their files: this package's, and torch's (nn.Module.__call__ runs
# between a user's line and a wrapper's forward).
_NOT_THE_USER = (os.path.dirname(__file__) + os.sep, os.path.dirname(torch.__file__) + os.sep)

SIMULATED = sim.NAME
FORCE_SIMULATION_ENV = sim.SIMULATE_ENV  # "1" (or true, yes, on): simulate even beside GPUs

DeviceLike = int | str | torch.device


@dataclass(frozen=True)
class Device:
    """One device of a DataParallel run: ``cuda:N``, ``sim:N`` or ``cpu``."""

    type: str
    index: int | None = None

    @property
    def is_simulated(self) -> bool:
        return self.type == SIMULATED

    @property
    def torch_device(self) -> torch.device:
        """The torch device of this device: ``cuda:N``, ``sim:N`` or ``cpu``."""
        if self.type == "cuda":
            return torch.device("cuda", self.index)
        if self.type == SIMULATED:
            sim.enable()  # once: registers the sim device type, installs the first-use patches
            return torch.device(SIMULATED, self.index)
        return torch.device("cpu")

    def __str__(self) -> str:
        if self.type == "cpu":
            return "cpu"
        return f"{self.type}:{self.index}"

    def describe(self) -> str:
        """A human label that never lets a simulated device pass for a real one."""
        if self.is_simulated:
            return f"{self} (simulated on the CPU)"
        if self.type == "cuda":
            return f"{self} ({torch.cuda.get_device_name(self.index)})"
        return str(self)


def device_type() -> str:
    """``"cuda"`` when PyTorch sees a GPU, otherwise ``"sim"`` (simulated devices).

    Setting ``LEARN_PARALLEL_SIMULATE=1`` picks simulated devices on a GPU
    machine too, so the CPU lessons (and tests) can run there unchanged.
    """
    if sim.simulation_forced() or not torch.cuda.is_available():
        return SIMULATED
    return "cuda"


def simulate_for_lessons(needed: int = 2) -> str:
    """Give this process ``needed`` devices for a multi-device lesson; say which, in one line.

    With ``needed`` GPUs or more, the lesson uses them. With fewer (one GPU, as on
    Colab, or none), it switches to simulated devices, at least ``needed`` of them:
    a lesson about splitting a batch cannot run on one device. The chapters and the
    exercise checks call this first. It sets ``LEARN_PARALLEL_SIMULATE=1`` (and
    ``LEARN_PARALLEL_SIMULATED_DEVICES`` where it had to add devices), so processes
    started from here make the same choice.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= needed and not sim.simulation_forced():
        return f"{gpus} GPUs: the lessons run on them."
    os.environ[FORCE_SIMULATION_ENV] = "1"
    note = ""
    if device_count() < needed:
        asked = device_count()
        note = f"; {SIMULATED_DEVICES_ENV}={asked} raised to {needed}, so a batch can be split"
        os.environ[SIMULATED_DEVICES_ENV] = str(needed)
    if gpus < needed:
        where = "no GPU" if gpus == 0 else f"{gpus} GPU" + ("" if gpus == 1 else "s")
        return f"Simulated devices, as this machine has {where}{note}."
    return f"Simulated devices, as {FORCE_SIMULATION_ENV}=1 ({gpus} GPUs visible){note}."


def device_count() -> int:
    """How many devices ``device_ids=None`` means on this machine."""
    if device_type() == "cuda":
        return torch.cuda.device_count()
    return sim.device_count()  # LEARN_PARALLEL_SIMULATED_DEVICES, default 4


def device_count_error(asked: int) -> str | None:
    """Why ``asked`` devices cannot be used here, with the fix; None if they can. The demo
    and the benchmark refuse, rather than simulate more than were asked for."""
    have = device_count()  # reads LEARN_PARALLEL_SIMULATED_DEVICES: a bad value raises here
    if asked <= have:
        return None
    if device_type() == "sim":
        return (
            f"{asked} devices asked for, but there are only {have} simulated devices; "
            f"set {SIMULATED_DEVICES_ENV}={asked} to simulate more"
        )
    return f"{asked} devices asked for, but this machine has {have} GPUs"


def first_device() -> torch.device:
    """Where a model goes before ``DataParallel(model)`` wraps it: the first device.

    ``cuda:0`` on a GPU machine, ``sim:0`` (a simulated device) without GPUs; the
    same code then runs on both.
    """
    return Device(device_type(), 0).torch_device


def resolve_devices(
    ids: Sequence[DeviceLike | Device] | DeviceLike | Device | None,
    *,
    output: bool = False,
    shared: bool = False,
) -> list[Device] | Device:
    """What a user passes, as checked devices: the one place device ids are read.

    ``ids`` is a ``device_ids`` list or tuple (not an iterator: the checks below read it
    twice): None means every device; each id is ``1``, ``"cuda:1"``, ``"sim:1"`` or a
    ``torch.device``; each device may be listed once
    (``shared=True``: more often, as parallel_apply's replicas may share a device).
    With ``output=True``, ``ids`` is one ``output_device`` instead, and the CPU
    (``"cpu"`` or ``-1``) is allowed: outputs may be gathered to host memory. A list
    of `Device` values is returned as it is, unchecked: it is what this function returned
    before (a forward's steps pass it on every call). So make `Device` values here: one
    built by hand is checked only when a forward uses it (a CPU one then fails unclearly).
    """
    if output:
        if isinstance(ids, Device):
            return ids
        return _parse(ids, device_type(), device_count(), allow_cpu=True)
    if ids is None:
        return [Device(device_type(), i) for i in range(device_count())]
    if isinstance(ids, int | str | torch.device | Device):
        raise TypeError(f"device_ids must be a list of ids, got {ids!r}; write [{ids!r}].")
    if not ids:
        raise ValueError(
            "device_ids is empty: pass at least one device id, or None for every device."
        )
    if all(isinstance(d, Device) for d in ids):
        return list(ids)
    kind, count = device_type(), device_count()  # once a list: steps of a forward call this
    devices = [d if isinstance(d, Device) else _parse(d, kind, count) for d in ids]
    if not shared and len(set(devices)) < len(devices):
        twice = next(d for d in devices if devices.count(d) > 1)
        raise ValueError(
            f"device_ids lists {twice} twice ({list(map(str, devices))}); "
            f"each device can hold only one replica, so list every id once."
        )
    return devices


def _forms(kind: str, allow_cpu: bool) -> str:
    """The id forms this machine accepts ('sim:N' where devices are simulated, 'cpu' only where
    the host is allowed: an output device), built only for an error: ids parse every step."""
    return f"an int, '{kind}:N'{', ' + repr('cpu') if allow_cpu else ''} or a torch.device"


def _parse(device: DeviceLike, kind: str, count: int, allow_cpu: bool = False) -> Device:
    """One id as a `Device` of this machine's ``kind`` (``count`` of them), or a clear error."""
    if isinstance(device, bool) or not isinstance(device, int | str | torch.device):
        raise TypeError(
            f"Expected a device id ({_forms(kind, allow_cpu)}), got {device!r} of type "
            f"{type(device).__name__}."
        )
    if isinstance(device, int):
        parsed = Device("cpu") if device == -1 and allow_cpu else Device(kind, device)
    else:
        name, _, index = str(device).partition(":")
        if name == "cpu":
            parsed = Device("cpu")
        elif name in ("cuda", SIMULATED) and (index == "" or index.isdigit()):
            if index:
                parsed = Device(name, int(index))
            else:  # a bare "cuda" means the current device, as in PyTorch; "sim" is sim:0
                parsed = Device(name, torch.cuda.current_device() if name == "cuda" else 0)
        else:
            raise ValueError(f"Unknown device {str(device)!r}; use {_forms(kind, allow_cpu)}.")
    if parsed.type == "cpu":
        if allow_cpu:
            return parsed
        raise ValueError(
            "Expected a non-cpu device in device_ids, but got: cpu. "
            "Pass GPU indices (or, without GPUs, simulated device indices such as [0, 1])."
        )
    if parsed.type != kind:
        raise ValueError(
            f"Device {parsed} is not available here: this machine runs on "
            f"{'GPUs' if kind == 'cuda' else 'simulated CPU devices'}; "
            f"pass plain integer ids such as [0, 1] instead."
        )
    if not 0 <= parsed.index < count:
        fix = (
            "Check device_ids against CUDA_VISIBLE_DEVICES."
            if kind == "cuda"
            else f"Set {SIMULATED_DEVICES_ENV} to simulate more."
        )
        raise ValueError(
            f"Device {parsed} does not exist: only {count} "
            f"{'visible GPUs' if kind == 'cuda' else 'simulated devices'} "
            f"(ids 0 to {count - 1}). {fix}"
        )
    return parsed


def synchronize(devices: Sequence[Device]) -> None:
    """Wait until every GPU in ``devices`` has finished its queued work.

    Simulated devices have nothing to wait for: each operation on them has
    finished when it returns.
    """
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device.index)


@dataclass(frozen=True)
class DeviceCapacity:
    """What the balance check compares between GPUs."""

    total_memory: int
    multi_processor_count: int


def _cuda_capacity(device: Device) -> DeviceCapacity:
    props = torch.cuda.get_device_properties(device.index)
    return DeviceCapacity(props.total_memory, props.multi_processor_count)


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the first line outside this package and torch: the user's, however deep."""
    frame, level = sys._getframe(1), 2  # stacklevel 1 would be this function
    while frame is not None and frame.f_code.co_filename.startswith(_NOT_THE_USER):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def check_balance(
    devices: Sequence[Device],
    capacity_of: Callable[[Device], DeviceCapacity] = _cuda_capacity,
    threshold: float = 0.75,
) -> bool:
    """Warn when one GPU has much less memory or fewer multiprocessors than another.

    Every replica gets an equal share of the batch, so the step waits for the
    slowest (or smallest) GPU. Returns True when the devices are balanced.
    Simulated devices are identical by construction and are not checked.
    """
    real = [d for d in devices if not d.is_simulated]
    if len(real) < 2:
        return True
    capacities = [capacity_of(d) for d in real]
    for field in ("total_memory", "multi_processor_count"):
        values = [getattr(c, field) for c in capacities]
        smallest, largest = min(values), max(values)
        if smallest < threshold * largest:
            weak, strong = real[values.index(smallest)], real[values.index(largest)]
            what = "memory" if field == "total_memory" else "multiprocessors"
            warn_at_user(
                f"GPU {weak.index} has less than {threshold:.0%} of the {what} of "
                f"GPU {strong.index}, and every replica gets an equal share of the "
                f"batch, so it will hold the others back. Leave it out with "
                f"device_ids=[...] or CUDA_VISIBLE_DEVICES.",
            )
            return False
    return True
