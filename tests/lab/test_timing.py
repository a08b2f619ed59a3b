"""The per-device recorder and the plots, on simulated devices.

What these prove: recording is off unless switched on; when on, every device
gets every phase of a training step, in a sensible order; records survive a
JSON round trip; concurrent threads lose no records; every plot writes a PNG
whose title names the hardware.
"""

import json
import threading
import time

import matplotlib
import pytest
import torch
from torch import nn

from learn_parallel import DataParallel, phases
from learn_parallel.devices import Device
from learn_parallel.lab.steps import train_step
from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline
from learn_parallel.lab.timing import Recorder, phase
from learn_parallel.lab.workloads import Workload

matplotlib.use("Agg")

STEP_PHASES = {
    *("scatter", "replicate", "forward", "gather", "loss", "backward", "optimizer"),
    *("grad scatter", "replica backward", "reduce"),  # backward's parts, see Recorder
}


def _train(dp: nn.Module, recorder: Recorder | None, steps: int = 2) -> None:
    optimizer = torch.optim.SGD(dp.parameters(), lr=0.1)
    # The batch may start on the host; the loss is taken where the output lands.
    x, y = torch.randn(16, 8), torch.randn(16, 1, device=dp.output_device.torch_device)
    for _ in recorder.steps(steps) if recorder else range(steps):
        train_step(dp, x, y, Workload("mlp", 16), optimizer)  # MSE, its phases marked


@pytest.fixture
def dp() -> DataParallel:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    return DataParallel(net.to(Device("sim", 0).torch_device))


@pytest.fixture
def recorded(dp) -> Timeline:
    with Recorder(devices=dp.devices) as recorder:
        _train(dp, recorder, steps=2)
    return recorder.timeline()


def test_off_by_default_records_nothing(dp):
    assert phases.set_listener(None) is None  # nobody listens
    assert phase("forward", Device("sim", 0)) is phase("scatter")  # one shared no-op
    idle = Recorder()  # made but never switched on
    _train(dp, None)
    with idle.phase("backward"):
        pass
    assert idle.timeline().records == []


def test_every_device_gets_every_phase_of_every_step(recorded):
    assert recorded.devices() == ["sim:0", "sim:1", "sim:2", "sim:3"]  # no host row on CPU
    assert recorded.steps() == [0, 1]
    for step in (0, 1):
        for device in recorded.devices():
            phases = [r.phase for r in recorded.records if r.device == device and r.step == step]
            assert sorted(phases) == sorted(STEP_PHASES), (device, step, phases)
    assert all(r.end_ms >= r.start_ms >= 0 for r in recorded.records)
    assert set(recorded.clocks.values()) == {"host"}
    assert recorded.hardware.label() == "4 simulated CPU devices"


def test_phases_come_in_order_within_a_step(recorded):
    def span(device, name, step=1):
        (r,) = [r for r in recorded.records if (r.device, r.phase, r.step) == (device, name, step)]
        return r

    for device in recorded.devices():
        order = ["scatter", "replicate", "forward", "gather", "loss", "backward", "optimizer"]
        starts = [span(device, name).start_ms for name in order]
        assert starts == sorted(starts), (device, starts)
        # Each replica's forward happens between replicate and gather.
        assert span(device, "replicate").end_ms <= span(device, "forward").start_ms
        assert span(device, "forward").end_ms <= span(device, "gather").start_ms


def test_records_round_trip_through_json(recorded):
    again = Timeline.from_dict(json.loads(json.dumps(recorded.to_dict())))
    assert again == recorded


def test_only_one_recorder_at_a_time():
    first = Recorder().start()
    try:
        with pytest.raises(RuntimeError, match="already switched on"):
            Recorder().start()
    finally:
        first.stop()
    assert phases.set_listener(None) is None  # stopping switched the listener off
    Recorder().start().stop()  # and another may start now


def test_a_rank_recorder_names_its_one_row_and_keeps_the_shared_clock():
    with pytest.raises(ValueError, match=r"row='rank:0' names one device's row; got 2"):
        Recorder(devices=[0, 1], row="rank:0")
    with pytest.raises(ValueError, match="non-cpu device"):
        Recorder(devices=["cpu"])  # the CPU is a row only for a gloo rank
    recorder = Recorder(devices=["cpu"], host_row=False, row="rank:1", origin_s=0.0)
    with recorder, phase("forward", torch.device("cpu")):
        pass
    (record,) = recorder.timeline().records
    assert record.device == "rank:1"
    # On perf_counter's own scale, which other processes share (not ms since the start,
    # which would be close to 0).
    now_ms = time.perf_counter() * 1e3
    assert now_ms - 5_000 < record.start_ms <= record.end_ms <= now_ms


def test_concurrent_threads_lose_no_records():
    threads_per_device, spans = 4, 50
    with Recorder() as recorder:

        def work(index: int) -> None:
            for _ in range(spans):
                with phase("forward", Device("sim", index % 4)):
                    pass

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4 * threads_per_device)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    records = recorder.timeline().records
    assert len(records) == 4 * threads_per_device * spans
    assert {r.device for r in records} == {"sim:0", "sim:1", "sim:2", "sim:3"}


def test_hardware_labels_name_the_hardware():
    four = Hardware("cuda", 4, ["NVIDIA H200"] * 4, "2.11.0", "13.0")
    assert four.label() == "4 x NVIDIA H200"
    assert four.label(2) == "2 x NVIDIA H200"
    mixed = Hardware("cuda", 2, ["NVIDIA H200", "NVIDIA A100"], "2.11.0")
    assert mixed.label() == "NVIDIA H200 + NVIDIA A100"
    assert Hardware("sim", 1, ["simulated CPU device"], "2.13.0").label() == (
        "1 simulated CPU device"
    )
    assert four.label(clock=True) == "4 x NVIDIA H200 (CUDA events)"
    assert (
        Hardware("sim", 2, [], "2.13.0").label(clock=True) == "2 simulated CPU devices (host clock)"
    )
    assert four.label(clock="NCCL") == "4 x NVIDIA H200 (NCCL)"  # a clock given in words
    gloo = Hardware("cpu", 2, ["CPU process"] * 2, "2.13.0", cpu_count=8)
    assert gloo.label(clock="gloo") == "2 CPU processes on 8 cores (gloo)"
    stored = four.to_dict()
    assert stored["label"] == "4 x NVIDIA H200" and stored["simulated"] is False
    assert Hardware.from_dict(stored) == four


def _results() -> list[dict]:
    rows = [
        ("single", 1, 10.0),
        ("learn_parallel", 1, 10.5),
        ("learn_parallel", 2, 7.0),
        ("torch_dp", 2, None),
        ("ddp", 1, 10.2),
        ("ddp", 2, 5.5),
    ]
    return [
        {
            "implementation": impl,
            "devices": n,
            "status": "ok" if ms else "not applicable",
            "step_ms": ms,
            "samples_per_s": 64 / (ms / 1e3) if ms else None,
        }
        for impl, n, ms in rows
    ]


def test_plots_write_png_files_with_the_hardware_in_the_title(recorded, tmp_path):
    from learn_parallel.lab import plots

    figures = {
        "timeline": plots.plot_timeline(recorded),
        "phases": plots.plot_phase_breakdown(recorded),
        "scaling": plots.plot_scaling(_results(), recorded.hardware.label(), "MLP"),
        "step-time": plots.plot_implementations(_results(), recorded.hardware.label(), "MLP"),
    }
    for name, fig in figures.items():
        title = fig.axes[0].get_title()
        assert "simulated CPU devices" in title, (name, title)
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        assert path.stat().st_size > 1000
        matplotlib.pyplot.close(fig)


def test_phase_totals_average_over_steps():
    hw = Hardware("sim", 1, ["simulated CPU device"], "x")
    records = [
        PhaseRecord("sim:0", "forward", 0.0, 2.0, 0),
        PhaseRecord("sim:0", "forward", 10.0, 14.0, 1),
        PhaseRecord("sim:0", "backward", 14.0, 15.0, 1),
    ]
    from learn_parallel.lab.plots import phase_totals

    totals = phase_totals(Timeline(hw, records, {"sim:0": "host"}))
    assert totals == {"sim:0": {"forward": 3.0, "backward": 0.5}}


def test_the_phase_breakdown_counts_nested_phases_once():
    # backward (10 ms) holds grad scatter, replica backward and reduce (9 ms in all): its own
    # time is the 1 ms its parts leave, so the stacked bars add up to the row's 10 ms.
    hw = Hardware("sim", 1, ["simulated CPU device"], "x")
    records = [
        PhaseRecord("sim:0", "backward", 0.0, 10.0, 0),
        PhaseRecord("sim:0", "grad scatter", 0.0, 1.0, 0),
        PhaseRecord("sim:0", "replica backward", 1.0, 7.0, 0),
        PhaseRecord("sim:0", "reduce", 7.0, 9.0, 0),
    ]
    from learn_parallel.lab.plots import phase_totals, plot_phase_breakdown

    timeline = Timeline(hw, records, {"sim:0": "host"})
    own = phase_totals(timeline, own=True)["sim:0"]
    assert own == {"backward": 1.0, "grad scatter": 1.0, "replica backward": 6.0, "reduce": 2.0}
    assert phase_totals(timeline)["sim:0"]["backward"] == 10.0
    ax = plot_phase_breakdown(timeline).axes[0]
    assert [t.get_text() for t in ax.texts] == [" 10.0 ms"]  # the row's total, once
    labels = ax.get_legend_handles_labels()[1]
    assert "backward, outside the phases it holds" in labels and "reduce" in labels
    matplotlib.pyplot.close(ax.figure)


def test_step_times_are_one_per_timed_step_after_the_untimed_warmup():
    from learn_parallel.lab.timing import step_times_ms

    calls = []
    times = step_times_ms(lambda: calls.append(1), [Device("sim", 0)], 3, 4)
    assert len(calls) == 7 and len(times) == 4
    assert all(t >= 0 for t in times)
