"""Recorded timelines tell the truth on GPUs (run with `pytest -m gpu` on two or more GPUs).

What these prove, on 2 GPUs, for the benchmark's MLP and (with torchvision)
ResNet-18: a recorded step spans what a timed step takes (median of the
recorded steps 1..5 within 15 % + 0.5 ms of the median timed step), the GPU
rows of a recorded step begin when the host issued its scatter (within
0.5 ms: the devices are idle when a recorded step begins), the event clock
and the host clock agree, and backward is recorded per device, inside the
training loop's backward.
"""

import statistics

import pytest
import torch

from experiments.timeline_check import clock_alignment, make_step, workloads_for
from learn_parallel.devices import Device
from learn_parallel.lab.timing import HOST, Recorder, step_spans, step_times_ms

pytestmark = pytest.mark.gpu
DEVICES = [Device("cuda", 0), Device("cuda", 1)]


def _workloads():
    names = ["mlp"]
    try:
        import torchvision  # noqa: F401

        names.append("resnet18")
    except ImportError:
        pass
    return names


@pytest.fixture(params=_workloads())
def recorded(request):
    torch.backends.cudnn.benchmark = False
    step, devs = make_step(workloads_for(DEVICES)[request.param], DEVICES)
    measured = statistics.median(step_times_ms(step, devs, warmup=3, steps=9))
    with Recorder(devices=devs) as recorder:
        for _ in recorder.steps(6):
            step()
    return measured, recorder.timeline()


def test_recorded_step_spans_the_measured_step_time(recorded):
    measured, timeline = recorded
    spans = step_spans(timeline)[1:]  # step 0 is the recorder's own first step
    span = statistics.median(s["span"] for s in spans)
    assert abs(span - measured) <= 0.15 * measured + 0.5, (span, measured, spans)


def test_gpu_rows_begin_when_the_host_issues_the_scatter(recorded):
    _, timeline = recorded
    for s in step_spans(timeline):
        assert -0.05 <= s["device_lag"] <= 0.5, s


def test_backward_is_recorded_per_device_inside_the_loops_backward(recorded):
    _, timeline = recorded
    for step in timeline.steps():
        (outer,) = [
            r for r in timeline.records if (r.device, r.phase, r.step) == (HOST, "backward", step)
        ]
        for device in ("cuda:0", "cuda:1"):
            (own,) = [
                r
                for r in timeline.records
                if (r.device, r.phase, r.step) == (device, "replica backward", step)
            ]
            assert own.duration_ms > 0
            # The GPU finishes its replica's backward after the host issued backward.
            assert own.start_ms >= outer.start_ms - 0.05, (own, outer)


def test_event_clock_and_host_clock_agree():
    for row in clock_alignment(DEVICES, gap_s=0.1):
        assert abs(row["event_ms"] - row["host_ms"]) <= 0.2, row
