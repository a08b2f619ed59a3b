"""What every chapter's measurement shares: `Measurement`, the timers, and the clock's name.

A measurement function is wrapped in `measured`: its timers (`median_ms`, `wall_ms`, or a
`uses_clock` of its own) say which clock they read, and `measured` writes that into the
result's ``clock`` and the label its plot carries, so no label can name a clock the
numbers were not taken with. The functions themselves live in `measure_pieces`,
`measure_steps` and `measure_tuple`; `measure` gathers them.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.lab import trace
from learn_parallel.lab.timing import step_times_ms

EVENTS = "CUDA events"
HOST = "host clock"
HOST_SYNCED = "host clock, GPUs synchronized"  # whole calls, every GPU idle before and after
HOST_RETURNED = "host clock, until the call returns"  # its GPU work enqueued, not awaited
_clocks: list[str] | None = None  # the clocks the running measurement's timers read


@dataclass
class Measurement:
    """One chapter's numbers: a value per x position for each named series."""

    key: str
    title: str  # what was measured; the plot adds the hardware
    xlabel: str
    ylabel: str  # with its unit
    x: list[str]  # device names, or sizes/counts when ``numeric_x``
    series: dict[str, list[float]]  # series name -> one value per x position
    hardware: str  # "4 x NVIDIA H200 (CUDA events)": the devices, then `clock` in brackets
    numeric_x: bool = False  # draw lines over numbers instead of bars over names
    note: str = ""
    # Interleaved rounds, where a verdict needs them: series -> per x position, each round's value.
    repeats: dict[str, list[list[float]]] = field(default_factory=dict)
    clock: str = ""  # what timed the numbers, as the timers said (`measured`)


def uses_clock(clock: str) -> None:
    """Say that the running measurement read ``clock`` (the timers below say it themselves)."""
    if _clocks is not None and clock not in _clocks:
        _clocks.append(clock)


def measured(function: Callable[..., Measurement]) -> Callable[..., Measurement]:
    """Run a measurement function; its ``clock`` and label come from the timers it used."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Measurement:
        global _clocks
        outer, _clocks = _clocks, []
        try:
            result = function(*args, **kwargs)
            used = list(_clocks)
        finally:
            _clocks = outer
        if not used:
            raise RuntimeError(f"{function.__name__} read no clock its timers could name.")
        result.clock = " and ".join(used)
        result.hardware = f"{result.hardware} ({result.clock})"
        return result

    return run


# [median-ms]
def median_ms(fn: Callable[[], Any], device: Device, repeats: int = 15) -> float:
    """Median time of ``fn()`` in milliseconds, measured on ``device``.

    On a GPU the clock is a pair of CUDA events on that GPU's current stream: from the moment
    the stream reaches the first to the moment it reaches the second, so it includes the GPU
    waiting for Python to launch the next kernel (a call that queues no GPU work still takes
    microseconds). On a simulated device it is the host clock. One untimed warm-up call first.
    """
    trace.refuse_after_profiler("median_ms")
    uses_clock(EVENTS if device.type == "cuda" else HOST)
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device.index)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


# [median-ms]


def wall_ms(fn: Callable[[], Any], devices: Sequence[Device], repeats: int = 15) -> float:
    """Median wall time of ``fn()`` in ms (host clock), with every device idle before and after."""
    uses_clock(synced_clock(devices))
    return statistics.median(step_times_ms(fn, devices, warmup=1, steps=repeats))


def synced_clock(devices: Sequence[Device]) -> str:
    """The clock of `timing.step_times_ms` on ``devices``: the host's, GPUs synchronized."""
    return HOST_SYNCED if any(d.type == "cuda" for d in devices) else HOST


def devices_of(devices: Sequence[DeviceLike] | None) -> list[Device]:
    return resolve_devices(None if devices is None else list(devices))


def mlp(width: int, layers: int, source: torch.device) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(source)


def counts(devs: Sequence[Device]) -> list[int]:
    """Device counts to sweep: 1, 2, 4, 8, ... and always all of them."""
    return [*[n for n in (1, 2, 4, 8, 16) if n < len(devs)], len(devs)]
