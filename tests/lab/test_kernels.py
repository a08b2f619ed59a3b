"""GPU time inside each bar (lab.kernels), with the profiler's events faked on the CPU.

What these prove: each GPU's bars are placed on the profiler's clock by that GPU's own
anchors (a spin kernel's end is the event after it), so GPUs whose event clocks sit at
different offsets get their work counted whole; work outside a bar, on another GPU, or on
two streams at once is not counted twice; a profiled pass runs its jobs after the timing,
lends the GPU times to the matching bars of the first recording and skips a failing job
with a warning. ``tests/gpu/test_gpu_timeline.py`` checks the same on real kernels.
"""

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from learn_parallel.devices import Device
from learn_parallel.lab import kernels, trace
from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline

MS = 1_000_000  # ns


def event(name, index, start_ns, end_ns, activity="kernel", device=DeviceType.CUDA):
    return SimpleNamespace(
        name=lambda: name,
        device_type=lambda: device,
        device_index=lambda: index,
        start_ns=lambda: start_ns,
        end_ns=lambda: end_ns,
        activity_type=lambda: activity,
    )


def profiled_timeline(offset_ms: dict[int, float]) -> tuple[Timeline, list]:
    """Two GPUs whose event clocks sit ``offset_ms`` apart from the profiler's: each has an
    anchor, a 1 ms forward bar with 0.5 ms of kernels at its very end, and a last anchor."""
    records, events = [], []
    for index, shift in offset_ms.items():
        row = f"cuda:{index}"
        records += [
            PhaseRecord(row, kernels.ANCHOR, 0.0, 1.0, 0),
            PhaseRecord(row, "forward", 10.0, 11.0, 0),
            PhaseRecord(row, kernels.ANCHOR, 20.0, 21.0, 0),
        ]
        on_profiler = lambda ms, s=shift: int((ms + s) * MS)  # noqa: E731
        events += [
            event("spin_kernel(long)", index, on_profiler(0.1), on_profiler(1.0)),
            event("gemm", index, on_profiler(10.5), on_profiler(11.0)),  # ends with the bar
            event("spin_kernel(long)", index, on_profiler(20.1), on_profiler(21.0)),
        ]
    hardware = Hardware("cuda", len(offset_ms), ["GPU"] * len(offset_ms), "2.13")
    return Timeline(hardware, records, {}, 0.0), events


def test_each_gpu_is_placed_by_its_own_anchor():
    # cuda:1's event clock sits 40 µs off cuda:0's against the profiler's: one shared anchor
    # would cut its kernels at the bar's end, its own anchors keep them whole.
    timeline, events = profiled_timeline({0: 1000.0, 1: 1000.04})
    events.append(event("learn_parallel.forward", 1, 1010 * MS, 1011 * MS, "gpu_user_annotation"))
    events.append(event("cudaStreamSynchronize", 1, 1011 * MS, 1012 * MS, "cuda_sync"))
    times, drift = kernels.bar_gpu_ms(timeline, events)
    assert times[("cuda:0", "forward", 0, 1)] == pytest.approx(0.5)
    assert times[("cuda:1", "forward", 0, 1)] == pytest.approx(0.5)  # annotations, syncs: no
    assert drift == {"cuda:0": 0.0, "cuda:1": 0.0}
    assert ("cuda:0", kernels.ANCHOR, 0, 1) not in times


def test_the_last_anchor_measures_how_far_the_clocks_drifted():
    timeline, events = profiled_timeline({0: 5.0})
    last = events[-1]
    events[-1] = event("spin_kernel(long)", 0, last.start_ns(), last.end_ns() + 3_000)  # +3 µs
    assert kernels.bar_gpu_ms(timeline, events)[1] == {"cuda:0": 3.0}


def test_a_gpu_without_its_anchor_kernels_is_refused():
    timeline, events = profiled_timeline({0: 0.0})
    with pytest.raises(RuntimeError, match="cuda:0: 2 clock anchors recorded, but the profiler"):
        kernels.bar_gpu_ms(timeline, [e for e in events if "spin" not in e.name()])


def test_busy_time_counts_only_inside_the_bar_and_overlaps_once():
    inside = [(8 * MS, 12 * MS), (14 * MS, 15 * MS), (30 * MS, 40 * MS)]
    assert kernels.busy_ms(inside, 10 * MS, 20 * MS) == pytest.approx(3.0)
    two_streams = [(11 * MS, 13 * MS), (12 * MS, 14 * MS), (12 * MS, 12.5 * MS)]
    assert kernels.busy_ms(two_streams, 10 * MS, 20 * MS) == pytest.approx(3.0)


def test_the_profiled_repeat_lends_its_gpu_times_to_the_matching_bars(monkeypatch):
    hardware = Hardware("cuda", 2, ["GPU", "GPU"], "2.13")
    first = Timeline(
        hardware,
        [
            PhaseRecord("cuda:0", "forward", 0, 4, 0),
            PhaseRecord("cuda:1", "forward", 1, 5, 0),
            PhaseRecord("host", "forward", 0, 1, 0),
        ],
        {},
    )
    profiled, events = profiled_timeline({0: 0.0, 1: 0.0})
    made = []
    monkeypatch.setattr(kernels, "profiled_recording", lambda step, d, n: (profiled, events))
    later = kernels.ProfiledPass()
    later.gpu_work(first, lambda: made.append(1) or (lambda: made.append(2)), [], 1, warmup=2)
    assert made == []  # nothing runs until every timed round is done
    later.run()
    assert made == [1, 2, 2]  # built again, warmed up, then profiled
    rows = {r.device: r for r in first.records}
    assert rows["cuda:0"].gpu_ms == rows["cuda:1"].gpu_ms == pytest.approx(0.5)
    assert rows["cuda:0"].start_ms == 0  # the bars stay the first, unprofiled recording's
    assert rows["host"].gpu_ms is None  # the host row has no device
    assert first.anchor_drift_us == {"cuda:0": 0.0, "cuda:1": 0.0}


def test_simulated_devices_are_profiled_after_the_timing_and_get_no_gpu_time():
    hardware = Hardware("sim", 1, ["s"], "2.13")
    first = Timeline(hardware, [PhaseRecord("sim:0", "forward", 0.0, 1.0, 0)], {})
    later = kernels.ProfiledPass()
    later.gpu_work(first, lambda: lambda: None, [Device("sim", 0)], 1, warmup=0)
    assert not trace.has_profiled()
    later.run()
    assert trace.has_profiled() and first.records[0].gpu_ms is None


def test_a_failing_job_is_skipped_with_a_warning_and_the_rest_still_run():
    ran = []
    later = kernels.ProfiledPass()
    later.add(lambda: 1 / 0)
    later.add(lambda: ran.append("second"))
    with pytest.warns(UserWarning, match="a profiled job failed: ZeroDivisionError"):
        later.run()
    assert ran == ["second"] and later.jobs == []


def test_before_torch_2_13_work_is_told_from_annotations_and_syncs_by_name():
    # torch 2.11's events have no activity_type: is_user_annotation and CUPTI's sync names.
    def old_event(name, annotation=False):
        e = event(name, 0, 0, 1)
        del e.activity_type
        e.is_user_annotation = lambda: annotation
        return e

    assert kernels.is_work(old_event("sm80_xmma_gemm"))
    assert kernels.is_work(old_event("Memcpy PtoP (Device -> Device)"))
    assert not kernels.is_work(old_event("learn_parallel.forward cuda:0", annotation=True))
    assert not kernels.is_work(old_event("Stream Sync"))
    assert kernels.is_work(event("gemm", 0, 0, 1))
    assert not kernels.is_work(event("x", 0, 0, 1, "gpu_user_annotation"))
