"""Per-device, per-phase timing of a DataParallel step (off unless switched on).

The core marks its phases (`learn_parallel.phases`); a switched-on `Recorder` listens, and
the training loop marks the rest itself::

    with Recorder(devices=dp.devices) as rec:
        for _ in rec.steps(3):
            loss = loss_fn(dp(x), y)           # scatter, replicate, forward, gather
            with rec.phase("backward"):
                loss.backward()
    timeline = rec.timeline()                  # plain data, JSON-ready (`lab.timeline`)

On GPUs a mark is a CUDA event on the device's current stream, on simulated devices the
host clock; the chapters plot what it records. `step_times_ms` times whole steps instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from learn_parallel import phases
from learn_parallel.devices import Device, DeviceLike, device_count, device_type, resolve_devices
from learn_parallel.devices import synchronize as synchronize_devices
from learn_parallel.lab import trace
from learn_parallel.lab.timeline import (
    HOST,
    PhaseRecord,
    Timeline,
    describe_hardware,
    replica_backward,
)

_active: Recorder | None = None  # the recorder switched on, if any


class _Mark:
    """A point in time: a host clock reading, or a CUDA event to be resolved later."""

    __slots__ = ("host_s", "event")

    def __init__(self, device: Device | None) -> None:
        self.event, self.host_s = None, 0.0
        if device is not None and device.type == "cuda":
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record(torch.cuda.current_stream(device.index))
        else:
            self.host_s = time.perf_counter()


class Recorder:
    """Collects the start and end of every phase on every device, step by step.

    A phase of no single device (scatter, gather, the loop's backward ...) is recorded on each
    of ``devices`` (default: all here): on GPUs an event pair on each one's current stream,
    with ``host_row`` (GPUs' default) also a host-clock bar for when Python issued it. One
    process of many (a DDP rank): ``row="rank:1"`` names its one device's row, and
    ``origin_s=0.0`` keeps ``time.perf_counter``'s scale, which every process shares.
    """

    def __init__(
        self,
        devices: Sequence[DeviceLike] | None = None,
        host_row: bool | None = None,
        row: str | None = None,
        origin_s: float | None = None,
    ) -> None:
        kind = device_type()
        ids = range(device_count()) if devices is None else devices
        # A row of its own may be the host's (the CPU); the devices of a step may not.
        self.devices: list[Device] = (
            resolve_devices(list(ids))
            if row is None
            else [resolve_devices(d, output=True) for d in ids]
        )
        if row is not None and len(self.devices) != 1:
            raise ValueError(f"row={row!r} names one device's row; got {len(self.devices)}.")
        self.host_row = (kind == "cuda") if host_row is None else host_row
        self.row, self._origin_s = row, origin_s
        self.step = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str, _Mark, _Mark, int, Device | None]] = []
        self._references: dict[Device, tuple[float, Any]] = {}
        self._t0 = 0.0
        self._running = False
        self._timeline: Timeline | None = None

    # -- switching on and off ------------------------------------------------
    def start(self) -> Recorder:
        global _active
        if _active is not None:
            raise RuntimeError("Another Recorder is already switched on; stop it first.")
        trace.refuse_after_profiler("Recording a timeline")
        self._t0 = time.perf_counter() if self._origin_s is None else self._origin_s
        for device in self.devices:
            self._reference(device)
        self._running = True
        _active = self
        phases.set_listener(self.phase)
        return self

    def stop(self) -> None:
        global _active
        self._running = False
        if _active is self:
            _active = None
            phases.set_listener(None)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _reference(self, device: Device) -> None:
        """Tie a device's event clock to the host clock (outside any step)."""
        if device.type != "cuda" or device in self._references:
            return
        # With the GPU idle the event completes the moment it is recorded, so
        # "ms after this event" plus its host time puts every GPU on one axis.
        torch.cuda.synchronize(device.index)
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device.index))
        self._references[device] = (time.perf_counter() - self._t0, event)

    # -- steps -----------------------------------------------------------------
    def steps(self, count: int | Iterable[Any], synchronize: bool = True) -> Iterator[Any]:
        """``for _ in rec.steps(3):`` numbers the loop's steps 0, 1, 2.

        With ``synchronize`` every device is idle when a step begins, as in `step_times_ms`;
        without, the host issues step N+1 while the GPUs still work on step N."""
        items = range(count) if isinstance(count, int) else count
        for number, item in enumerate(items):
            if synchronize:
                synchronize_devices(self.devices)
            self.step = number
            yield item
        if synchronize:
            synchronize_devices(self.devices)

    # -- phases ----------------------------------------------------------------
    @contextmanager
    def phase(self, name: str, device: Device | DeviceLike | None = None) -> Iterator[None]:
        """Time the body as phase ``name`` on ``device`` (None: the recorder's devices)."""
        if not self._running:
            yield
            return
        where = self.devices
        if device is not None:
            if self.row is not None:  # a row of its own may be the host's (the CPU)
                where = [resolve_devices(device, output=True)]
            else:
                where = resolve_devices([device])
        step = self.step
        starts = self._marks(where)
        host_start = _Mark(None) if device is None and self.host_row else None
        try:
            yield
        finally:
            ends = self._marks(where)
            new = [
                (self.row or str(d), name, s, e, step, d) for d, s, e in zip(where, starts, ends)
            ]
            if host_start is not None:
                new.append((HOST, name, host_start, _Mark(None), step, None))
            with self._lock:
                self._pending.extend(new)
                self._timeline = None

    @staticmethod
    def _marks(devices: Sequence[Device]) -> list[_Mark]:
        # Simulated devices all read the one host clock: read it once.
        host = None
        marks = []
        for d in devices:
            if d.type == "cuda":
                marks.append(_Mark(d))
            else:
                host = host or _Mark(None)
                marks.append(host)
        return marks

    # -- reading ---------------------------------------------------------------
    def timeline(self) -> Timeline:
        """Everything recorded so far, in ms; waits for the GPUs once, here."""
        with self._lock:
            pending = list(self._pending)
            if self._timeline is not None:
                return self._timeline
        gpus = {d for *_, d in pending if d is not None and d.type == "cuda"}
        for device in gpus:
            if device not in self._references:
                self._reference(device)  # first seen mid-run: this costs one sync
            torch.cuda.synchronize(device.index)
        records, clocks = [], {}
        for row, name, start, end, step, device in pending:
            ms = self._ms(start, device), self._ms(end, device)
            records.append(PhaseRecord(row, name, *ms, step))
            clocks[row] = "cuda-event" if start.event is not None else "host"
        records += replica_backward(records)
        used = {d for *_, d in pending if d is not None} | set(self.devices)
        hardware = describe_hardware(sorted(used, key=lambda d: d.index or 0))
        result = Timeline(hardware, records, clocks, self._t0)
        with self._lock:
            self._timeline = result
        return result

    def _ms(self, mark: _Mark, device: Device | None) -> float:
        if mark.event is None:
            return (mark.host_s - self._t0) * 1e3
        offset_s, reference = self._references[device]
        return offset_s * 1e3 + reference.elapsed_time(mark.event)


def step_times_ms(
    step: Callable[[], Any],
    devices: Sequence[Device],
    warmup: int,
    steps: int,
    host_ms: list[float] | None = None,
) -> list[float]:
    """Wall time (host clock) of each of ``steps`` calls of ``step`` in ms, after ``warmup``
    untimed ones; every device idle at each call's start and end, so it times that call's work.
    ``host_ms`` gets, per step, the host time until ``step`` returned (its work enqueued)."""
    trace.refuse_after_profiler("Timing steps")
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        synchronize_devices(devices)
        start = time.perf_counter()
        step()
        returned = time.perf_counter()
        synchronize_devices(devices)
        times.append((time.perf_counter() - start) * 1e3)
        if host_ms is not None:
            host_ms.append((returned - start) * 1e3)
    return times


phase = phases.phase  # the same marks as the core's, for phases outside DataParallel
