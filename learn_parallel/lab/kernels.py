"""What the GPU computed inside each bar of a timeline, beside how long its stream was busy.

A `Recorder` bar on a GPU runs from the moment the device's stream reaches the phase's
start event to its end event. For these small, launch-bound steps that includes the GPU
waiting for Python to launch the next kernel, so a long bar need not mean much work.
`with_gpu_times` records the same steps a second time under torch.profiler and adds to
every bar of the first recording ``gpu_ms``: the time the profiler's device-side events
(kernels, copies, memsets) of that device ran inside the matching bar of the second. The
first recording keeps bars free of the profiler's own cost. The devices chapter shows both.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from torch.autograd import DeviceType
from torch.autograd.profiler import record_function

from learn_parallel.lab.timing import PhaseRecord, Timeline
from learn_parallel.lab.trace import profiler, quiet_stderr

Interval = tuple[int, float, float]  # (device index, start s, end s) on time.perf_counter


def device_intervals(prof, anchor_ns: int, anchor_name: str) -> list[Interval]:
    """The profiler's device-side events, on ``time.perf_counter``'s scale.

    ``anchor_ns`` is ``perf_counter_ns()`` read as the ``anchor_name`` range began: that
    range's start in the profiler's own clock ties the two clocks together.
    """
    events = prof.profiler.kineto_results.events()
    anchor = next(e for e in events if e.name() == anchor_name)
    offset_ns = anchor_ns - anchor.start_ns()
    return [
        (e.device_index(), (e.start_ns() + offset_ns) / 1e9, (e.end_ns() + offset_ns) / 1e9)
        for e in events
        if e.device_type() == DeviceType.CUDA
    ]


def gpu_ms(record: PhaseRecord, origin_s: float, intervals: list[Interval]) -> float:
    """Milliseconds of device-side work on ``record``'s GPU inside its bar."""
    index = int(record.device.partition(":")[2])
    start, end = origin_s + record.start_ms / 1e3, origin_s + record.end_ms / 1e3
    busy = sum(max(0.0, min(end, e) - max(start, s)) for d, s, e in intervals if d == index)
    return busy * 1e3


def _key(records: list[PhaseRecord]) -> dict[tuple[str, str, int, int], PhaseRecord]:
    """Each bar by (device, phase, step, n-th such bar): the same in two recordings of one run."""
    seen: defaultdict[tuple[str, str, int], int] = defaultdict(int)
    keyed = {}
    for r in sorted(records, key=lambda r: (r.step, r.start_ms)):
        n = seen[(r.device, r.phase, r.step)]
        seen[(r.device, r.phase, r.step)] += 1
        keyed[(r.device, r.phase, r.step, n)] = r
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
    measured = {
        key: gpu_ms(r, profiled.origin_s, intervals)
        for key, r in _key(profiled.records).items()
        if r.device.startswith("cuda:")
    }
    records = [
        replace(r, gpu_ms=measured.get(key)) if key in measured else r
        for key, r in _key(timeline.records).items()
    ]
    return replace(timeline, records=records)
