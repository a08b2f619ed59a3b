"""How many simulated devices there are, whether they are forced, which one ``"sim"`` means.

The two environment variables are read here: ``LEARN_PARALLEL_SIMULATED_DEVICES`` (the
count behind ``torch.sim.device_count()`` and ``device_ids=None``; 4 when unset or empty)
and ``LEARN_PARALLEL_SIMULATE`` (simulate even where GPUs exist: `simulation_forced`).
The current device is per thread, as CUDA's is; `follow_current_device` makes torch's
own ``torch.accelerator`` and ``module.to("sim")`` use it.
"""

from __future__ import annotations

import os
import threading

import torch

NAME = "sim"
SIMULATED_DEVICES_ENV = "LEARN_PARALLEL_SIMULATED_DEVICES"
DEFAULT_SIMULATED_DEVICES = 4
SIMULATE_ENV = "LEARN_PARALLEL_SIMULATE"
# The usual spellings of a yes and a no (case and surrounding spaces ignored); unset is a no.
TRUTHY, FALSY = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def device_count() -> int:
    """How many simulated devices exist: ``LEARN_PARALLEL_SIMULATED_DEVICES``, default 4."""
    raw = os.environ.get(SIMULATED_DEVICES_ENV, "")
    if not raw.strip():  # unset or empty: the default, as for any unset option
        return DEFAULT_SIMULATED_DEVICES
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(
            f"{SIMULATED_DEVICES_ENV}={raw!r} is not a positive integer; "
            f"set it to the number of simulated devices you want, e.g. 2 "
            f"(empty or unset: {DEFAULT_SIMULATED_DEVICES})."
        )
    return count


def simulation_forced() -> bool:
    """Whether ``LEARN_PARALLEL_SIMULATE`` asks for simulated devices even where GPUs exist."""
    raw = os.environ.get(SIMULATE_ENV, "")
    value = raw.strip().lower()
    if value in TRUTHY or value in FALSY:
        return value in TRUTHY
    raise ValueError(
        f"{SIMULATE_ENV}={raw!r} is neither on nor off: set it to one of "
        f"{', '.join(TRUTHY)} to simulate devices even where GPUs exist, or to one of "
        f"{', '.join(repr(v) for v in FALSY)} (or unset it) to use the GPUs."
    )


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
    count = device_count()
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


def with_index(where: DeviceArg) -> DeviceArg:
    """``where`` with the current index if it names ``sim`` without one; anything else as given."""
    if isinstance(where, torch.device):
        bare = where.type == NAME and where.index is None
    else:
        bare = isinstance(where, str) and where == NAME
    return torch.device(NAME, current_device()) if bare else where


def with_index_given(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments of ``tensor.to(...)`` with a bare ``sim`` given its current index."""
    if "device" in kwargs:
        kwargs = {**kwargs, "device": with_index(kwargs["device"])}
    return (args[0], *map(with_index, args[1:])), kwargs


def _exchange(index: int) -> int:
    previous = current_device()
    set_device(index)
    return previous


def follow_current_device() -> None:
    """Make torch's own calls for the current device use this thread's simulated one.

    torch's helper for backends written in Python gives them a fixed C++ device guard: it
    answers index 0 and ignores a new one. ``torch.accelerator``'s functions ask that guard
    through four ``torch._C`` functions, answered here instead, and ``module.to("sim")``
    gets its index here before C++ would ask the guard. (What C++ resolves on its own,
    ``cpu_tensor.to("sim")`` and ``torch.tensor(..., device="sim")``, still means ``sim:0``.)
    """
    torch._C._accelerator_getDeviceIndex = current_device
    torch._C._accelerator_setDeviceIndex = set_device
    torch._C._accelerator_exchangeDevice = _exchange
    torch._C._accelerator_maybeExchangeDevice = _exchange
    parse_to = torch._C._nn._parse_to

    def _parse_to(*args: object, **kwargs: object) -> tuple:
        where, *rest = parse_to(*args, **kwargs)
        return (with_index(where), *rest)

    _parse_to.__wrapped__ = parse_to  # type: ignore[attr-defined]
    torch._C._nn._parse_to = _parse_to
