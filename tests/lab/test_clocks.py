"""Every title and table header names the clock its numbers were taken with, from the data.

What these prove: a measurement's ``clock`` is whatever its timers reported reading (one or
several, none is an error), and its label carries exactly that; the chapters' plot titles
and the ladder's table header over ``bench.json`` take the clock from the recording's own
field (``clock`` of each measurement, of ``bench.json``'s meta, of ``ladder.json``); a timer
of whole steps names the host clock with GPUs synchronized, never CUDA events.
"""

from __future__ import annotations

import json

import pytest
from _book import BOOK

from learn_parallel.devices import Device
from learn_parallel.lab import bridges, measure, measurement, records
from learn_parallel.lab.measurement import EVENTS, HOST, HOST_SYNCED, Measurement, measured
from learn_parallel.lab.plots import plot_measurement

SIM = [Device("sim", 0), Device("sim", 1)]


def _result(**kw) -> Measurement:
    return Measurement("k", "t", "x", "y (ms)", ["a"], {"s": [1.0]}, "2 test devices", **kw)


def test_a_measurement_names_the_clocks_its_timers_read():
    @measured
    def host_only():
        measurement.median_ms(lambda: None, SIM[0], repeats=1)
        return _result()

    @measured
    def two_clocks():
        measurement.uses_clock(EVENTS)
        measurement.wall_ms(lambda: None, SIM, repeats=1)
        return _result()

    @measured
    def none():
        return _result()

    assert (host_only().clock, host_only().hardware) == (HOST, "2 test devices (host clock)")
    assert two_clocks().hardware == "2 test devices (CUDA events and host clock)"
    with pytest.raises(RuntimeError, match="none read no clock its timers could name"):
        none()


def test_whole_calls_on_gpus_are_host_time_not_cuda_events():
    # worker_overhead, tuple_vs_data_parallel and the chain time with wall_ms/step_times_ms.
    assert measurement.synced_clock([Device("cuda", 0), Device("cuda", 1)]) == HOST_SYNCED
    assert measurement.synced_clock(SIM) == HOST
    assert measure.worker_overhead(SIM).clock == HOST  # its timer's, on these devices


def test_each_panel_title_names_its_own_clock():
    live = measure.worker_overhead(SIM)
    recorded = measure.load_recorded().measurement("worker_overhead")
    titles = [ax.get_title() for ax in plot_measurement(live, recorded).axes]
    assert titles[0].endswith(f"({live.clock})") and titles[1].endswith(f"({recorded.clock})")


def test_every_recorded_measurement_names_its_clock_as_its_label_does():
    recorded = measure.load_recorded()
    for m in [*recorded.measurements.values(), *recorded.repeat.values()]:
        assert m.clock and m.hardware == f"{recorded.hardware} ({m.clock})", m.key


def test_recorded_measurements_carry_the_clock_field_their_timers_wrote():
    data = records.read_json("chapters.json", measure.load_recorded().machine)
    if not all("clock" in m for m in data["measurements"].values()):
        pytest.skip("chapters.json was recorded before measurements named their clock")
    assert data["measurements"]["worker_overhead"]["clock"] == HOST_SYNCED  # wall_ms on GPUs


def _outputs(chapter: str, index: int) -> str:
    cell = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"][index]
    return "".join("".join(o.get("text", "")) for o in cell["outputs"])


def test_the_ladder_table_header_over_bench_times_names_the_bench_clock():
    bench = measure.load_recorded().bench
    assert bridges.clock_of(bench) == bench["meta"].get("clock", HOST_SYNCED)
    header = _outputs("ladder", 3).splitlines()[0]
    label = bench["meta"]["hardware"]["label"]
    assert header == f"bench.json, recorded on {label} ({bridges.clock_of(bench)})"
    assert "CUDA events" not in header


def test_a_timeline_title_names_a_host_row_only_where_there_is_one():
    from learn_parallel.lab.plots import plot_timeline
    from learn_parallel.lab.timeline import HOST as HOST_ROW
    from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline

    gpus = [PhaseRecord("cuda:0", "forward", 0.0, 2.0, 0, gpu_ms=0.5)]
    host = [PhaseRecord(HOST_ROW, "forward", 0.0, 1.0, 0)]
    hardware = Hardware("cuda", 1, ["GPU"], "x")
    for rows, named in ((gpus, False), (gpus + host, True)):
        ax = plot_timeline(Timeline(hardware, rows, {})).axes[0]
        assert ("host row" in ax.get_title()) is named, ax.get_title()
        # The strip's length is the GPU work; its place in the bar is not recorded.
        strip = [t.get_text() for t in ax.get_legend().get_texts()][-1]
        assert strip.endswith("its total, drawn from\nthe bar's start"), strip


def test_a_collectives_strip_is_drawn_apart_from_the_strips_of_computation():
    from learn_parallel.lab.plots import COLLECTIVE_STRIP, plot_timeline
    from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline

    hardware = Hardware("cuda", 1, ["GPU"], "x")
    rows = [
        PhaseRecord("cuda:0", "backward", 0.0, 2.0, 0, gpu_ms=1.5),
        PhaseRecord("cuda:0", "all-reduce", 2.0, 0.5, 0, gpu_ms=3.0),  # longer than its bar
    ]
    ax = plot_timeline(Timeline(hardware, rows, {})).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-2].startswith("GPU work (profiler)") and "NCCL" in labels[-1], labels
    thin = [p for p in ax.patches if abs(p.get_height() - 0.16) < 1e-9]
    hatches = {round(p.get_width(), 3): p.get_hatch() for p in thin}
    assert hatches == {1.5: None, 3.0: COLLECTIVE_STRIP["hatch"]}, hatches
    # With no collective, the legend has no entry for one.
    ax = plot_timeline(Timeline(hardware, rows[:1], {})).axes[0]
    assert not any("NCCL" in t.get_text() for t in ax.get_legend().get_texts())


def test_the_clone_panels_name_their_own_clocks():
    # The left panel is replicate_host_ms (until replicate returns), the right whole steps.
    report = {
        "hardware": {"label": "2 test devices", "device_type": "sim"},
        "workloads": {"mlp": {"title": "MLP, batch 8"}},
        "rows": [
            {"workload": "mlp", "rung": r, "step_ms": 1.0, "status": "ok"}
            for r in ("broadcast", "clone")
        ],
        "replicate_host_ms": {"mlp": {"broadcast": 0.1, "clone": 0.2}},
    }
    axes = bridges.plot_strategies([("here", report)]).axes
    # titles wrap to fit two panels side by side: a line break stands for a space
    left, right = (ax.get_title().replace("\n", " ") for ax in axes)
    assert left == f"here: 2 test devices ({measurement.HOST_RETURNED})"
    assert right == f"here: 2 test devices ({HOST})"
    assert f"({measurement.HOST_RETURNED})" in bridges.ladder_table(report | {"set": "clone"})
