"""Recorded timelines tell the truth on GPUs (run with `pytest -m gpu` on two or more GPUs).

What these prove, on 2 GPUs, for the benchmark's MLP and (with torchvision)
ResNet-18: a recorded step spans what that same step took on the host clock
(steps 1..5, each within 10 % + 0.3 ms of its own wall time; the recorder's
own cost is not part of this, ``python -m experiments.recorder_cost`` measures it), the GPU
rows of a recorded step begin when the host issued its scatter (within
0.5 ms: the devices are idle when a recorded step begins), the event clock
and the host clock agree, and backward is recorded per device, inside the
training loop's backward.
"""

import time

import pytest
import torch

from experiments.timeline_check import clock_alignment, make_step, workloads_for
from learn_parallel.devices import Device, synchronize
from learn_parallel.lab.timing import HOST, Recorder, step_spans

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
    for _ in range(3):
        step()  # warm-up: kernels chosen, worker threads started
    walls = []
    with Recorder(devices=devs) as recorder:
        for _ in recorder.steps(6):  # every device is idle when a step begins
            start = time.perf_counter()
            step()
            synchronize(devs)
            walls.append((time.perf_counter() - start) * 1e3)
    return walls, recorder.timeline()


def test_recorded_step_spans_the_wall_time_of_that_step(recorded):
    walls, timeline = recorded
    spans = step_spans(timeline)
    assert [s["step"] for s in spans] == list(range(6))
    for s, wall in list(zip(spans, walls))[1:]:  # step 0 is the recorder's own first step
        assert abs(s["span"] - wall) <= 0.1 * wall + 0.3, (s, wall)


def test_gpu_rows_begin_when_the_host_issues_the_scatter(recorded):
    _, timeline = recorded
    for s in step_spans(timeline):
        # Below zero by at most the clocks' tie (Recorder._reference): the host reads its
        # clock when record() returns, and the GPU stamps the event a little later (tens of
        # microseconds; -0.051 ms seen once on an H200 host). Causality is what is checked.
        assert -0.1 <= s["device_lag"] <= 0.5, s


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
