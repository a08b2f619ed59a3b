"""GPU time inside each bar (lab.kernels), with the profiler's events faked on the CPU.

The GPU run of ``tests/gpu/test_gpu_timeline.py`` checks the same on real kernels.
"""

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from learn_parallel.lab import kernels
from learn_parallel.lab.timing import Hardware, PhaseRecord, Timeline


def event(name, device_type, index, start_ns, end_ns, activity="kernel"):
    return SimpleNamespace(
        name=lambda: name,
        device_type=lambda: device_type,
        device_index=lambda: index,
        start_ns=lambda: start_ns,
        end_ns=lambda: end_ns,
        activity_type=lambda: activity,
    )


def test_device_events_are_moved_onto_the_perf_counter_scale_by_the_anchor():
    anchor = event("anchor", DeviceType.CPU, -1, 5_000, 6_000)
    kernel = event("gemm", DeviceType.CUDA, 1, 7_000, 9_000)
    host_op = event("aten::mm", DeviceType.CPU, -1, 7_000, 8_000)
    # The profiler draws its own phase ranges on the GPU's timeline too: they are not work.
    annotation = event(
        "learn_parallel.forward", DeviceType.CUDA, 1, 6_000, 9_500, "gpu_user_annotation"
    )
    sync = event("cudaStreamSynchronize", DeviceType.CUDA, 1, 9_500, 9_600, "cuda_sync")
    events = [anchor, kernel, host_op, annotation, sync]
    prof = SimpleNamespace(
        profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))
    )
    # perf_counter read 1_005_000_000 ns when the anchor began at 5_000 ns of the profiler
    ((index, start, end),) = kernels.device_intervals(prof, 1_005_000_000, "anchor")
    assert index == 1 and (start, end) == (pytest.approx(1.005002), pytest.approx(1.005004))


def test_gpu_ms_counts_only_that_device_and_only_inside_the_bar():
    bar = PhaseRecord("cuda:1", "forward", start_ms=10.0, end_ms=20.0, step=0)
    origin = 100.0  # seconds on perf_counter at 0 ms
    intervals = [
        (1, 100.008, 100.012),  # 2 ms of it inside the bar (10-12 ms)
        (1, 100.014, 100.015),  # 1 ms inside
        (0, 100.010, 100.020),  # another device
        (1, 100.030, 100.040),  # after the bar
    ]
    assert kernels.gpu_ms(bar, origin, intervals) == pytest.approx(3.0)
    # Work on two streams at once counts once: the GPU was busy, not busy twice.
    overlapping = [(1, 100.011, 100.013), (1, 100.012, 100.014), (1, 100.012, 100.0125)]
    assert kernels.gpu_ms(bar, origin, overlapping) == pytest.approx(3.0)


def test_the_second_recording_lends_its_gpu_times_to_the_matching_bars(monkeypatch):
    hardware = Hardware("cuda", 2, ["GPU", "GPU"], "2.13")

    def timeline(origin, shift):
        records = [
            PhaseRecord("cuda:0", "forward", 0 + shift, 4 + shift, 0),
            PhaseRecord("cuda:1", "forward", 1 + shift, 5 + shift, 0),
            PhaseRecord("host", "forward", 0 + shift, 1 + shift, 0),
        ]
        return Timeline(hardware, records, {}, origin)

    runs = iter([timeline(10.0, 0.0), timeline(20.0, 0.5)])
    idle = SimpleNamespace(start=lambda: None, stop=lambda: None)
    monkeypatch.setattr(kernels, "profiler", lambda cuda: idle)
    monkeypatch.setattr(kernels, "device_intervals", lambda prof, ns, name: [(1, 20.002, 20.003)])
    result = kernels.with_gpu_times(lambda: next(runs))
    by_row = {r.device: r for r in result.records}
    assert by_row["cuda:1"].gpu_ms == pytest.approx(1.0)  # measured in the profiled run
    assert by_row["cuda:0"].gpu_ms == 0.0
    assert by_row["host"].gpu_ms is None  # the host row has no device
    assert by_row["cuda:1"].start_ms == 1.0  # the bars are the first, unprofiled run's


def test_simulated_devices_are_recorded_once_with_no_gpu_time():
    calls = []
    hardware = Hardware("sim", 2, ["s", "s"], "2.13")

    def record():
        calls.append(1)
        return Timeline(hardware, [PhaseRecord("sim:0", "forward", 0.0, 1.0, 0)], {}, 0.0)

    result = kernels.with_gpu_times(record)
    assert len(calls) == 1 and result.records[0].gpu_ms is None


def test_before_torch_2_13_work_is_told_from_annotations_and_syncs_by_name():
    # torch 2.11's events have no activity_type: is_user_annotation and CUPTI's sync names.
    def old_event(name, annotation=False):
        e = event(name, DeviceType.CUDA, 0, 0, 1)
        del e.activity_type
        e.is_user_annotation = lambda: annotation
        return e

    assert kernels.is_work(old_event("sm80_xmma_gemm"))
    assert kernels.is_work(old_event("Memcpy PtoP (Device -> Device)"))
    assert not kernels.is_work(old_event("learn_parallel.forward cuda:0", annotation=True))
    assert not kernels.is_work(old_event("Stream Sync"))
    assert kernels.is_work(event("gemm", DeviceType.CUDA, 0, 0, 1))
    assert not kernels.is_work(event("x", DeviceType.CUDA, 0, 0, 1, "gpu_user_annotation"))
