"""The benchmark as the performance chapter calls it: ``bench.run(bench.settings(...))``.

What these prove: unset choices are filled in for this machine and too many devices are
refused in words; every implementation gets a row, torch's DataParallel included (it runs
on simulated devices), with positive numbers and per-device timelines; a failing run is a
row, not a lost benchmark; DDP rows come from `ddp_times.time_ddp` (faked here; the
command line's test runs the real processes), and a batch too small for the ranks fails
only its own workload. No test here asserts any speed.
"""

import pytest
import torch

from experiments import benchmark as bench
from learn_parallel.lab import steps
from learn_parallel.lab.processes import RankFailed, share
from learn_parallel.lab.timeline import Timeline
from learn_parallel.lab.workloads import Workload

QUICK_MLP = {"quick": True, "workloads": ["mlp"], "devices": [1, 2], "timeline_steps": 1}


def test_settings_fill_in_this_machine_and_refuse_too_many_devices():
    quick = bench.settings(quick=True)
    assert quick.devices == [1, 2] and quick.cudnn_modes == [False]
    assert [w.kind for w in quick.workloads] == ["mlp", "conv"]
    assert quick.workloads[1].model == "small_cnn" and (quick.warmup, quick.steps) == (2, 5)
    cpu = bench.settings(workloads=["mlp"], sizes={"mlp": {"batch": 96}}, lr=0.1)
    assert cpu.devices == [1, 2, 4] and cpu.workloads[0].batch == 96 and cpu.lr == 0.1
    assert bench.settings(devices=[2]).notes == ["single is always measured on one device"]
    with pytest.raises(ValueError, match="9 devices asked for, but there are only 4 simulated"):
        bench.settings(devices=[1, 9])


def test_every_implementation_runs_on_simulated_devices():
    settings = bench.settings(implementations=["single", "learn_parallel", "torch_dp"], **QUICK_MLP)
    report = bench.run(settings)
    rows = {(r["implementation"], r["devices"]): r for r in report["results"]}
    assert set(rows) == {
        ("single", 1),
        *((i, n) for i in ("learn_parallel", "torch_dp") for n in (1, 2)),
    }
    for row in rows.values():
        assert row["status"] == "ok" and row["step_ms"] > 0 and len(row["step_ms_all"]) == 5
    assert report["meta"]["hardware"]["label"] == "2 simulated CPU devices"  # what ran
    assert report["meta"]["cpu_threads"].startswith("CPU timings: one thread per simulated")
    assert torch.get_num_threads() == 1
    recorded = {(t["implementation"], t["devices"]) for t in report["timelines"]}
    assert recorded == {
        ("single", 1),
        ("learn_parallel", 1),
        ("learn_parallel", 2),
    }  # torch's marks none
    wide = next(t for t in report["timelines"] if t["devices"] == 2)
    assert Timeline.from_dict(wide["timeline"]).devices() == ["sim:0", "sim:1"]
    assert report["groups"][0]["parameters"] == 4 * (128 * 128 + 128)


def test_a_failing_run_is_a_row_and_the_others_still_run(monkeypatch):
    def broken(model, device_ids):
        raise RuntimeError("out of memory, say")

    monkeypatch.setitem(bench.WRAPPERS, "torch_dp", broken)
    settings = bench.settings(implementations=["learn_parallel", "torch_dp"], **QUICK_MLP)
    rows = {(r["implementation"], r["devices"]): r for r in bench.run(settings)["results"]}
    assert rows["torch_dp", 2]["status"] == "failed"
    assert rows["torch_dp", 2]["note"] == "RuntimeError: out of memory, say"
    assert rows["learn_parallel", 2]["status"] == "ok"


def test_ddp_rows_come_from_time_ddp_and_a_too_small_batch_fails_alone(monkeypatch):
    """With 9 processes a conv batch of 32 leaves the last rank empty, an MLP batch of 512
    does not: only the conv row fails (naming its batch); the MLP still runs under DDP."""
    launched = []

    def fake_time_ddp(workloads, world, warmup, steps, backend, timeout_s, **kwargs):
        launched.append(([w.kind for w in workloads], world, kwargs["cudnn_benchmark"]))
        return {w.kind: {"ddp": {"status": "ok", "step_ms_all": [2.0, 4.0]}} for w in workloads}

    monkeypatch.setattr(bench, "time_ddp", fake_time_ddp)
    groups = [
        bench.Group(Workload("mlp", 512, width=8, layers=2), None),
        bench.Group(Workload("conv", 32, image_size=8, model="small_cnn"), None),
    ]
    settings = bench.settings(quick=True, devices=[1])
    rows = {r["group"]: r for r in bench.ddp_rows(9, groups, settings)}
    assert launched == [(["mlp"], 9, False)]
    assert rows["mlp"]["status"] == "ok" and rows["mlp"]["step_ms"] == 3.0
    assert rows["conv"]["status"] == "failed"
    assert rows["conv"]["note"].startswith("global batch 32 too small for 9 processes")


def test_a_failed_ddp_launch_fails_its_rows_with_the_ranks_traceback(monkeypatch):
    def failing(*args, **kwargs):
        raise RankFailed("rank 1 failed:\nTraceback ...\nRuntimeError: gloo says no")

    monkeypatch.setattr(bench, "time_ddp", failing)
    groups = [bench.Group(Workload("mlp", 64, width=8, layers=2), None)]
    (row,) = bench.ddp_rows(2, groups, bench.settings(quick=True))
    assert row["status"] == "failed" and row["note"].endswith("RuntimeError: gloo says no")


def test_simulate_on_a_gpu_host_benchmarks_simulated_devices(monkeypatch):
    """LEARN_PARALLEL_SIMULATE=1 (set for every non-GPU test) wins over visible GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host, not hidden
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    built = []
    original = steps.build_model

    def build_model(workload, seed=0):
        built.append(original(workload, seed))
        return built[-1]

    monkeypatch.setattr(steps, "build_model", build_model)
    settings = bench.settings(implementations=["single", "learn_parallel"], **QUICK_MLP)
    report = bench.run(settings)
    assert all(r["status"] == "ok" for r in report["results"]), report["results"]
    assert built and all(next(m.parameters()).device.type == "sim" for m in built)
    rows = {row for t in report["timelines"] for row in Timeline.from_dict(t["timeline"]).devices()}
    assert rows == {"sim:0", "sim:1"}


def test_ddp_ranks_split_the_batch_like_chunk():
    for batch, world in ((10, 4), (9, 8), (64, 2), (5, 1)):
        sizes = [share(batch, world, rank) for rank in range(world)]
        chunks = [len(c) for c in torch.arange(batch).chunk(world)]
        assert sizes[: len(chunks)] == chunks and sum(sizes) == batch
