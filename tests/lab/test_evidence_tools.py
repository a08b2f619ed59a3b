"""The tools behind the book's evidence, on simulated devices.

What these prove: phases become profiler ranges, from worker threads too, and a
Chrome trace holds them; backward is split per device (grad scatter, replica
backward, reduce) in the right order; `step_spans` reads a timeline's raw
numbers; the fresh/persistent/caller runners give the same outputs and only
the persistent one reuses its threads; torch's real gather returns a ``map``
object's text for strings and raises for ints and dataclasses; the benchmark
writes a trace when asked; a missing recording is one message, not an error.
"""

import json
import threading

import pytest
import torch
from torch import nn

import learn_parallel as lp
from experiments import benchmark as bench
from learn_parallel.lab import gather_probe, persistent_workers, records
from learn_parallel.lab.timeline import HOST, Hardware, PhaseRecord, Timeline, step_spans
from learn_parallel.lab.timing import Recorder, phase
from learn_parallel.lab.trace import chrome_trace


def _model() -> nn.Module:
    torch.manual_seed(0)
    # On device 0 (sim:0 here): DataParallel's default device_ids[0], where it must live.
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    return model.to(lp.devices.resolve_devices([0])[0].torch_device)


def test_phases_are_profiler_ranges_in_every_thread(tmp_path):
    dp = lp.DataParallel(_model())
    path = tmp_path / "trace.json"
    with chrome_trace(path), phase("backward"):
        dp(torch.randn(16, 8)).sum().backward()
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("name", "").startswith("learn_parallel")}
    forwards = {f"learn_parallel.forward sim:{i}" for i in range(4)}
    assert forwards <= names, names  # recorded in the four worker threads
    assert {
        "learn_parallel.DataParallel.forward",
        "learn_parallel.scatter",
        "learn_parallel.replicate",
        "learn_parallel.gather",
        "learn_parallel.backward",
        "learn_parallel.grad scatter",
        "learn_parallel.reduce",
    } <= names
    threads = {e["tid"] for e in events if e.get("name") in forwards}
    assert len(threads) == 4


def test_backward_parts_come_in_order_on_every_device():
    dp = lp.DataParallel(_model())
    with Recorder(devices=dp.devices) as recorder:
        for _ in recorder.steps(2):
            output = dp(torch.randn(16, 8))
            with phase("backward"):
                output.sum().backward()
    timeline = recorder.timeline()
    for device in timeline.devices():
        spans = {r.phase: r for r in timeline.records if r.device == device and r.step == 1}
        grad, own, reduce = spans["grad scatter"], spans["replica backward"], spans["reduce"]
        assert grad.end_ms == own.start_ms and own.end_ms == reduce.start_ms
        assert spans["backward"].start_ms <= grad.start_ms
        assert reduce.end_ms <= spans["backward"].end_ms


def test_step_spans_read_the_raw_numbers():
    hardware = Hardware("cuda", 1, ["GPU"], "x")
    records = [
        PhaseRecord(HOST, "scatter", 0.0, 1.0, 0),
        PhaseRecord("cuda:0", "scatter", 0.5, 1.0, 0),
        PhaseRecord("cuda:0", "backward", 1.0, 9.0, 0),
        PhaseRecord(HOST, "scatter", 3.0, 3.5, 1),  # issued while the GPU was busy
        PhaseRecord("cuda:0", "scatter", 9.0, 9.5, 1),
        PhaseRecord("cuda:0", "backward", 9.5, 15.0, 1),
    ]
    spans = step_spans(Timeline(hardware, records, {}))
    assert spans[0]["span"] == 9.0 and spans[0]["device_lag"] == 0.5
    assert spans[1]["span"] == 12.0 and spans[1]["device_span"] == 6.0
    assert spans[1]["device_lag"] == 6.0
    assert spans[1]["previous_device_end"] == 9.0 == spans[1]["first_device_start"]


def test_runners_agree_and_only_persistent_threads_are_reused():
    def job(i):
        return lambda: (i * 2, threading.get_ident())

    jobs = [job(i) for i in range(3)]
    persistent = persistent_workers.PersistentThreads(3)
    try:
        first, again = persistent(jobs), persistent(jobs)
    finally:
        persistent.close()
    fresh = persistent_workers.run_fresh_threads(jobs)
    caller = persistent_workers.run_in_caller(jobs)
    values = [0, 2, 4]
    assert [v for v, _ in first] == [v for v, _ in fresh] == [v for v, _ in caller] == values
    assert [t for _, t in first] == [t for _, t in again]  # job i: the same thread every call
    assert {t for _, t in caller} == {threading.get_ident()}


def test_torch_gather_on_strings_ints_and_dataclasses():
    cases = gather_probe.probe()
    strings = cases["strings of equal length"]["torch"]
    assert strings == {"returned": "str", "repr": "'<map object at 0x...>'"}
    assert cases["strings of different lengths"]["torch"]["returned"] == "str"
    assert cases["ints"]["torch"]["raised"] == "TypeError"
    assert cases["dataclass holding a tensor"]["torch"] == {
        "raised": "TypeError",
        "message": "'Prediction' object is not iterable",
    }
    assert cases["ints"]["learn_parallel"] == {"returned": "list", "repr": "[1, 2]"}
    assert cases["dataclass holding a tensor"]["learn_parallel"]["returned"] == "Prediction"


def test_bench_writes_a_trace_when_asked(tmp_path):
    settings = bench.settings(
        quick=True,
        workloads=["mlp"],
        implementations=["learn_parallel"],
        devices=[1, 2],
        timeline_steps=0,
        trace=tmp_path / "trace.json",
    )
    report = bench.run(settings)
    (row,) = [r for r in report["results"] if r["devices"] == 2]
    assert row["trace"] == "trace-mlp-learn_parallel-2.json"
    events = json.loads((tmp_path / row["trace"]).read_text())["traceEvents"]
    assert any(e.get("name") == "learn_parallel.forward sim:1" for e in events)
    assert not (tmp_path / "trace-mlp-learn_parallel-1.json").exists()  # most devices only


def test_a_missing_recording_is_one_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))
    assert records.load_json("no_such_file.json", "no-machine") is None
    assert "No recorded no_such_file.json for no-machine" in capsys.readouterr().out
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x.json").write_text('{"a": 1, "measured": {}}')
    assert records.load_json("x.json", "m") == {"a": 1, "measured": {}}
    assert capsys.readouterr().out == ""  # found, and nothing it measured has changed


@pytest.mark.parametrize("synchronize", [True, False])
def test_recorded_steps_are_numbered_either_way(synchronize):
    dp = lp.DataParallel(_model())
    with Recorder(devices=dp.devices) as recorder:
        for _ in recorder.steps(2, synchronize=synchronize):
            dp(torch.randn(8, 8))
    assert recorder.timeline().steps() == [0, 1]
