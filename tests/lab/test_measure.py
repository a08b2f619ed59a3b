"""The book's per-chapter measurements: shapes, labels, the recorded data, and the CLI."""

from __future__ import annotations

import functools
import json
import math
import threading

import pytest
import torch
from torch import nn

from experiments import measure as driver
from learn_parallel.devices import Device
from learn_parallel.lab import measure
from learn_parallel.lab.persistent_workers import run_fresh_threads
from learn_parallel.lab.plots import plot_measurement
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate

DEVICES = [Device("sim", i) for i in range(3)]
# Every measurement at its default sizes, but five rounds of a 4096-row step per device count
# is a GPU's workload: on simulated devices the test times a smaller batch.
SMALL = {"tuple_vs_data_parallel": {"rows": 256}}


def _well_formed(m: measure.Measurement) -> None:
    assert m.series and all(len(values) == len(m.x) for values in m.series.values()), m
    assert all(math.isfinite(v) and v >= 0 for values in m.series.values() for v in values), m
    assert m.title and m.xlabel and "(" in m.ylabel, "the y label names its unit"


@pytest.mark.parametrize("key", list(driver.MEASUREMENTS))
def test_every_measurement_runs_on_simulated_devices(key):
    m = driver.MEASUREMENTS[key](DEVICES, **SMALL.get(key, {}))
    _well_formed(m)
    assert m.key == key
    clock = "bytes of live tensors" if key == "peak_memory" else "host clock"
    assert (m.clock, m.hardware) == (clock, f"3 simulated CPU devices ({clock})")


def test_per_device_measurements_have_one_bar_per_device():
    assert measure.matmul(DEVICES).x == ["sim:0", "sim:1", "sim:2"]
    assert measure.gather_targets(DEVICES).x == ["sim:0", "sim:1", "sim:2", "cpu"]


def test_sweeps_cover_powers_of_two_and_every_device():
    m = measure.worker_overhead(DEVICES)
    assert m.x == ["1", "2", "3"] and m.numeric_x
    assert set(m.series) == {
        "persistent workers (learn_parallel)",
        "a new thread per replica per call",
    }


def test_peak_memory_shows_device_0_holding_more_under_data_parallel():
    m = measure.peak_memory(DEVICES, rows=600, classes=2000)
    dp, tp = m.series["DataParallel"], m.series["TupleParallel"]
    logits_mib = 600 * 2000 * 4 / 2**20  # every logit gathered onto device 0
    assert dp[0] > logits_mib and dp[0] > 2 * max(dp[1:])
    assert max(tp) < dp[0] - logits_mib / 2  # TupleParallel leaves logits where computed


def test_timelines_hold_the_phases_of_their_chapter():
    forward = measure.parallel_apply_timeline(DEVICES)
    assert {r.phase for r in forward.records} == {"forward"}
    assert {r.device for r in forward.records} == {"sim:0", "sim:1", "sim:2"}
    training = measure.training_timeline(DEVICES)
    phases = {r.phase for r in training.records}
    assert phases >= {"scatter", "replicate", "forward", "gather", "loss", "backward", "optimizer"}


def test_fresh_threads_compute_what_parallel_apply_computes():
    """The baseline of the worker-overhead plot: a new thread per replica per call (one
    replica: no thread, as torch's parallel_apply), the same outputs as ours."""
    torch.manual_seed(0)
    devices = [Device("sim", i).torch_device for i in range(3)]
    replicas = replicate(nn.Linear(4, 2).to(devices[0]), [0, 1, 2], detach=True)
    inputs = [torch.randn(2, 4, device=d) for d in devices]
    jobs = [lambda r=r, x=x: r(x) for r, x in zip(replicas, inputs)]
    with torch.no_grad():
        ours = parallel_apply(replicas, [(x,) for x in inputs])
        baseline = run_fresh_threads(jobs)
        (alone,) = run_fresh_threads([lambda: threading.current_thread()])
    for a, b in zip(ours, baseline):
        assert torch.equal(a, b)
    assert alone is threading.current_thread()


def test_the_cli_writes_what_load_recorded_reads(tmp_path, monkeypatch):
    small = {k: functools.partial(driver.MEASUREMENTS[k], **kw) for k, kw in SMALL.items()}
    monkeypatch.setattr(driver, "MEASUREMENTS", {**driver.MEASUREMENTS, **small})
    assert driver.main(["--out", str(tmp_path / "sim-x2"), "--devices", "2"]) == 0
    report = json.loads((tmp_path / "sim-x2" / "chapters.json").read_text())
    # The recording keeps the command, without the folders of the machine that made it.
    assert report["command"] == "python -m experiments.measure --out .../sim-x2 --devices 2"
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))
    recorded = measure.load_recorded("sim-x2")
    assert recorded.hardware == "2 simulated CPU devices"  # each measurement names its clock
    assert recorded.measurement("peak_memory").clock == "bytes of live tensors"
    assert set(recorded.measurements) == set(driver.MEASUREMENTS)
    assert recorded.measurement("matmul").x == ["sim:0", "sim:1"]
    assert set(recorded.timelines) == set(driver.TIMELINES)
    with pytest.raises(KeyError, match="has no measurement 'nope'"):
        recorded.measurement("nope")


def test_the_cli_refuses_more_devices_than_there_are(capsys):
    with pytest.raises(SystemExit):
        driver.main(["--out", "unused", "--devices", "99"])
    assert "--devices must be between 1 and 4, got 99" in capsys.readouterr().err


def test_the_recorded_run_is_complete():
    recorded = measure.load_recorded()  # the machine the chapters read, found from the data
    gpus = recorded.bench["meta"]["hardware"]["device_count"]
    assert recorded.machine.endswith(f"-x{gpus}") and recorded.hardware.startswith(f"{gpus} x ")
    # peak_memory too (GPUs), and the chain from chain_bench.json, its own driver's file
    assert set(recorded.measurements) == {*driver.MEASUREMENTS, "chain"}
    for m in recorded.measurements.values():
        _well_formed(m)
        assert m.clock and m.hardware == f"{recorded.hardware} ({m.clock})"
    devices = [f"cuda:{i}" for i in range(gpus)]
    assert recorded.measurement("scatter_copy").x == devices
    assert len(recorded.measurement("worker_overhead").series) == 3  # torch's version too
    assert [r["devices"] for r in recorded.chain_bench["results"]] == list(range(2, gpus + 1))
    chain = recorded.measurement("chain")
    assert chain.hardware == f"{recorded.hardware} (host clock, GPUs synchronized)"
    assert recorded.bench_timeline("mlp", "learn_parallel", gpus).hardware.device_count == gpus
    assert set(recorded.repeat) == set(driver.MEASUREMENTS)  # the second, back-to-back run


def test_a_missing_recording_says_where_it_looked(monkeypatch, tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match="No recorded runs in .*learn_parallel/lab/recorded/x99.*LEARN_PARALLEL_DATA",
    ):
        measure.load_recorded("x99")
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))  # replaces the packaged folder
    with pytest.raises(FileNotFoundError, match=f"No recorded runs in {tmp_path}: no chapters"):
        measure.load_recorded()


def test_the_recordings_are_package_data():
    from importlib import resources

    folder = resources.files("learn_parallel.lab") / "recorded"
    recorded = measure.load_recorded()
    assert recorded.source == str(folder / recorded.machine)


def test_the_plot_names_the_hardware_of_each_panel():
    live = measure.matmul(DEVICES)
    recorded = measure.load_recorded()
    fig = plot_measurement(live, recorded.measurement("matmul"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "this machine: 3 simulated CPU devices (host clock)",
        f"recorded: {recorded.hardware} ({recorded.measurement('matmul').clock})",
    ]
    assert all(ax.get_ylabel() == "time per matmul (ms)" for ax in fig.axes)
    assert len(plot_measurement(live).axes) == 1
