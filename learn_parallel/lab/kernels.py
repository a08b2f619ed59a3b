"""What the GPU computed inside each bar of a timeline: a profiled pass after all timing.

A driver records its timelines unprofiled while it times, and queues each with a way to
run the same steps again (`ProfiledPass.gpu_work`). Once every timed round is done,
`ProfiledPass.run` runs each again under torch.profiler and gives every GPU bar of the first
recording ``gpu_ms``: how long that GPU ran kernels, copies or memsets inside the matching
bar of the profiled repeat, overlapping work counted once. Bars and kernels meet on each
GPU's own clock: before and after the profiled steps a spin kernel sits between two CUDA
events on every GPU, and the event after it ends when the kernel does, so one instant is
known on both clocks. (Tying them through the host clock instead, one anchor for all GPUs,
left each GPU's clock offset uncorrected: a short bar could lose its last kernels.)
"""

from __future__ import annotations

import gc
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch.autograd import DeviceType

from learn_parallel.devices import Device
from learn_parallel.lab import trace
from learn_parallel.lab.timeline import HOST, PhaseRecord, Timeline
from learn_parallel.lab.timing import Recorder

ANCHOR = "clock anchor"  # the phase around each GPU's spin kernel
# Identical replicas' GPU work in one bar agrees within this share of the middle value (the
# upper of the middle two for an even count) or this many ms, whichever is larger
# (tests/gpu/test_gpu_timeline.py; book/data/README.md says where it was measured); the
# chapters print per-bar GPU work no finer than the second.
STRIP_TOLERANCE = (0.15, 0.005)
SPIN_CYCLES = 1_000_000  # about half a millisecond: the end event is queued before it ends
# Work, not the profiler's own phase ranges on the GPU's timeline or its sync records.
GPU_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
SYNCS = ("Event Sync", "Stream Sync", "Context Sync", "Stream Wait Event")  # CUPTI's names
Key = tuple[str, str, int, int]  # (row, phase, step, n-th such bar)


def is_work(e) -> bool:
    """A kernel, copy or memset; torch < 2.13 has no activity_type: rule out the rest by name."""
    if hasattr(e, "activity_type"):
        return e.activity_type() in GPU_WORK
    return not e.is_user_annotation() and e.name() not in SYNCS


class ProfiledPass:
    """Work that runs torch.profiler, queued while a driver times and run after all of it."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []

    def add(self, job: Callable[[], None]) -> None:
        """Queue any profiled job (a Chrome trace, say)."""
        self.jobs.append(job)

    def gpu_work(
        self,
        timeline: Timeline,
        make: Callable[[], Callable[[], Any]],
        devices: Sequence[Device],
        steps: int,
        warmup: int = 2,
    ) -> None:
        """Queue ``timeline``'s GPU work: ``make()`` builds its step again, ``warmup`` calls
        run unprofiled, then ``steps`` recorded under the profiler lend their ``gpu_ms``
        (simulated devices have none: one step, profiled in the same order)."""
        if timeline.hardware.device_type != "cuda":
            steps, warmup = 1, 0
        self.add(partial(lend_gpu_times, timeline, make, list(devices), steps, warmup))

    def run(self) -> None:
        """Every queued job, in order; one that fails is skipped with a warning."""
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            try:
                job()
            except trace.ProfiledProcessError:
                raise
            except Exception as error:  # noqa: BLE001 - one lost strip is not a lost run
                warnings.warn(
                    f"a profiled job failed: {type(error).__name__}: {error}", stacklevel=2
                )
            finally:
                gc.collect()  # the job's model and step go before the next one is built
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()


def lend_gpu_times(timeline, make, devices, steps: int, warmup: int) -> None:
    """Profile ``steps`` calls of a fresh ``make()``; each GPU bar of ``timeline`` gets the
    ``gpu_ms`` of the matching bar, and ``timeline`` its anchors' drift."""
    step = make()
    for _ in range(warmup):
        step()
    profiled, events = profiled_recording(step, devices, steps)
    times, timeline.anchor_drift_us = bar_gpu_ms(profiled, events)
    for key, record in _key(timeline.records).items():
        if key in times:
            record.gpu_ms = times[key]


def profiled_recording(step: Callable[[], Any], devices: Sequence[Device], steps: int):
    """``steps`` calls of ``step`` recorded under the profiler, between two clock anchors per
    GPU; the timeline and the profiler's events (none without GPUs)."""
    gpus = [d for d in devices if d.type == "cuda"]
    prof = trace.profiler(cuda=bool(gpus))
    with trace.quiet_stderr():
        prof.start()
    try:
        with Recorder(devices=devices) as recorder:
            _anchor(recorder, gpus)
            for _ in recorder.steps(steps):
                step()
            _anchor(recorder, gpus)
        timeline = recorder.timeline()
    finally:
        with trace.quiet_stderr():
            prof.stop()
    return timeline, (list(prof.profiler.kineto_results.events()) if gpus else [])


def _anchor(recorder: Recorder, gpus: Sequence[Device]) -> None:
    for device in gpus:  # events and kernel on the device's current stream, in this order
        with torch.cuda.device(device.index), recorder.phase(ANCHOR, device):
            torch.cuda._sleep(SPIN_CYCLES)


def bar_gpu_ms(timeline: Timeline, events: Sequence[Any]) -> tuple[dict[Key, float], dict]:
    """Per GPU bar of ``timeline``, the ms its GPU ran work inside it; per GPU row, how far
    (µs) the last anchor's kernel ended from where the first anchor put it."""
    work: dict[int, list[tuple[int, int]]] = defaultdict(list)
    spins: dict[int, list[int]] = defaultdict(list)  # end of each spin kernel, ns
    for e in events:
        if e.device_type() == DeviceType.CUDA and is_work(e):
            if "spin_kernel" in e.name():
                spins[e.device_index()].append(e.end_ns())
            else:
                work[e.device_index()].append((e.start_ns(), e.end_ns()))
    anchors: dict[str, list[float]] = defaultdict(list)
    for r in sorted(timeline.records, key=lambda r: r.start_ms):
        if r.phase == ANCHOR:
            anchors[r.device].append(r.end_ms)
    offsets, drift = {}, {}
    for row, ends in anchors.items():
        spun = sorted(spins[_index(row)])
        if len(spun) != len(ends):
            raise RuntimeError(
                f"{row}: {len(ends)} clock anchors recorded, but the profiler saw {len(spun)} "
                "spin kernels there: its GPU work cannot be placed in the bars."
            )
        offsets[row] = spun[0] - ends[0] * 1e6  # profiler ns = event ms * 1e6 + offset
        drift[row] = round((spun[-1] - ends[-1] * 1e6 - offsets[row]) / 1e3, 3)
    times = {}
    for key, r in _key([r for r in timeline.records if r.phase != ANCHOR]).items():
        if r.device in offsets:
            edges = (ms * 1e6 + offsets[r.device] for ms in (r.start_ms, r.end_ms))
            times[key] = busy_ms(work[_index(r.device)], *edges)
    return times, drift


def busy_ms(intervals: Sequence[tuple[int, int]], start_ns: float, end_ns: float) -> float:
    """Milliseconds of [start_ns, end_ns] covered by ``intervals``, overlaps counted once."""
    busy, reached = 0.0, start_ns
    for s, e in sorted((max(s, start_ns), min(e, end_ns)) for s, e in intervals):
        busy += max(0.0, e - max(s, reached))
        reached = max(reached, e)
    return busy / 1e6


def _index(row: str) -> int:
    return int(row.partition(":")[2])


def _key(records: Sequence[PhaseRecord]) -> dict[Key, PhaseRecord]:
    """Each bar by (row, phase, step, n-th such bar): the same in two recordings of one step."""
    seen: Counter[tuple[str, str, int]] = Counter()
    keyed = {}
    for r in sorted(records, key=lambda r: (r.step, r.start_ms)):
        if r.device != HOST:
            seen[r.device, r.phase, r.step] += 1
            keyed[r.device, r.phase, r.step, seen[r.device, r.phase, r.step]] = r
    return keyed
