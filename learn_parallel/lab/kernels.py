"""What the GPU computed inside each bar of a timeline, beside how long its stream was busy.

`with_gpu_times` records the same steps again under torch.profiler and gives each GPU bar
of the first recording ``gpu_ms``: how long that device ran kernels or copies inside the
matching bar of the second, which alone pays the profiler's cost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from torch.autograd import DeviceType
from torch.autograd.profiler import record_function

from learn_parallel.lab.timing import PhaseRecord, Timeline
from learn_parallel.lab.trace import profiler, quiet_stderr

Interval = tuple[int, float, float]  # (device index, start s, end s) on time.perf_counter
# Work, not the profiler's own phase ranges on the GPU's timeline or its sync records.
GPU_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
SYNCS = ("Event Sync", "Stream Sync", "Context Sync", "Stream Wait Event")  # CUPTI's names


def is_work(e) -> bool:
    """A kernel, copy or memset; torch < 2.13 has no activity_type: rule out the rest by name."""
    if hasattr(e, "activity_type"):
        return e.activity_type() in GPU_WORK
    return not e.is_user_annotation() and e.name() not in SYNCS


def device_intervals(prof, anchor_ns: int, anchor_name: str) -> list[Interval]:
    """The profiler's device-side events on ``time.perf_counter``'s scale: ``anchor_ns`` was
    read as the ``anchor_name`` range began, whose start in the profiler's clock ties the two."""
    events = prof.profiler.kineto_results.events()
    anchor = next(e for e in events if e.name() == anchor_name)
    offset_ns = anchor_ns - anchor.start_ns()
    return [
        (e.device_index(), (e.start_ns() + offset_ns) / 1e9, (e.end_ns() + offset_ns) / 1e9)
        for e in events
        if e.device_type() == DeviceType.CUDA and is_work(e)
    ]


def gpu_ms(record: PhaseRecord, origin_s: float, intervals: list[Interval]) -> float:
    """Milliseconds inside ``record``'s bar during which its GPU ran work (overlaps once)."""
    index = int(record.device.partition(":")[2])
    start, end = origin_s + record.start_ms / 1e3, origin_s + record.end_ms / 1e3
    busy, reached = 0.0, start
    for s, e in sorted((max(s, start), min(e, end)) for d, s, e in intervals if d == index):
        busy += max(0.0, e - max(s, reached))
        reached = max(reached, e)
    return busy * 1e3


def _key(records: list[PhaseRecord]) -> dict[tuple[str, str, int, int], PhaseRecord]:
    """Each bar by (device, phase, step, n-th such bar): the same in two recordings of one run."""
    seen: Counter[tuple[str, str, int]] = Counter()
    keyed = {}
    for r in sorted(records, key=lambda r: (r.step, r.start_ms)):
        seen[r.device, r.phase, r.step] += 1
        keyed[r.device, r.phase, r.step, seen[r.device, r.phase, r.step]] = r
    return keyed


def with_gpu_times(record: Callable[[], Timeline]) -> Timeline:
    """``record()``'s timeline; on GPUs each GPU bar also carries its ``gpu_ms`` (see above)."""
    timeline = record()
    if timeline.hardware.device_type != "cuda":
        return timeline  # simulated devices compute on the host: nothing runs on a device
    prof = profiler(cuda=True)
    with quiet_stderr():
        prof.start()
    try:
        name = f"learn_parallel.anchor {id(prof)}"
        with record_function(name):
            anchor_ns = time.perf_counter_ns()
        profiled = record()
    finally:
        with quiet_stderr():
            prof.stop()
    intervals = device_intervals(prof, anchor_ns, name)
    profiled_bars = {k: r for k, r in _key(profiled.records).items() if r.device != "host"}
    records = [
        replace(r, gpu_ms=gpu_ms(profiled_bars[k], profiled.origin_s, intervals))
        if k in profiled_bars
        else r
        for k, r in _key(timeline.records).items()
    ]
    return replace(timeline, records=records)
