"""``python -m learn_parallel bench`` end to end, on simulated devices and gloo DDP.

What these prove: the command runs to the end, every implementation gets a
row for every device count (torch's DataParallel honestly marked as not
applicable without GPUs), the numbers are positive, learn_parallel's timelines
are stored, and the plots exist. No test here asserts any speed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from learn_parallel.lab import bench
from learn_parallel.lab.processes import share
from learn_parallel.lab.timing import Timeline

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/lab/ is two below


def _bench(out: Path, *options: str, gpus: bool = False) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LEARN_PARALLEL_SIMULATED_DEVICES", None)
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""  # simulated devices, even on a GPU machine
    done = subprocess.run(
        [sys.executable, "-m", "learn_parallel", "bench", "--quick", "--no-progress",
         "--out", str(out), *options],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "bench.json").read_text()), done.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    report, stdout = _bench(out)
    return out, report, stdout


def test_report_has_metadata(quick_run):
    _, report, _ = quick_run
    meta = report["meta"]
    assert report["schema"] == bench.SCHEMA
    assert meta["command"].startswith("python -m learn_parallel bench --quick")
    assert meta["hardware"]["label"] == "4 simulated CPU devices"
    assert meta["torch_version"] and meta["date"]
    assert meta["settings"]["devices"] == [1, 2]


def test_every_implementation_and_device_count_has_a_row(quick_run):
    _, report, _ = quick_run
    assert [g["key"] for g in report["groups"]] == ["mlp", "conv"]
    for group in report["groups"]:
        rows = {(r["implementation"], r["devices"]): r for r in report["results"]
                if r["group"] == group["key"]}  # fmt: skip
        assert set(rows) == {
            ("single", 1),
            *((impl, n) for impl in ("learn_parallel", "torch_dp", "ddp") for n in (1, 2)),
        }
        for (impl, _), row in rows.items():
            if impl == "torch_dp":
                assert row["status"] == "not applicable" and "step_ms" not in row
                continue
            assert row["status"] == "ok", row
            assert row["step_ms"] > 0 and row["samples_per_s"] > 0
            assert len(row["step_ms_all"]) == report["meta"]["settings"]["steps"]


def test_learn_parallel_timelines_cover_every_device(quick_run):
    _, report, _ = quick_run
    recorded = {(t["group"], t["implementation"], t["devices"]) for t in report["timelines"]}
    for group in ("mlp", "conv"):
        assert {(group, "learn_parallel", 1), (group, "learn_parallel", 2)} <= recorded
    wide = next(t for t in report["timelines"] if t["devices"] == 2)
    timeline = Timeline.from_dict(wide["timeline"])
    assert timeline.devices() == ["sim:0", "sim:1"]
    for device in timeline.devices():
        assert {r.phase for r in timeline.records if r.device == device} == {
            "scatter", "replicate", "forward", "gather", "loss", "backward", "optimizer",
            "grad scatter", "replica backward", "reduce",  # backward's parts, per device
        }  # fmt: skip


def test_plots_and_summary_are_written(quick_run):
    out, report, stdout = quick_run
    for group in ("mlp", "conv"):
        for kind in ("scaling", "step-time", "timeline", "phases"):
            name = f"{group}-{kind}.png"
            assert name in report["plots"]
            assert (out / name).stat().st_size > 1000
    assert "samples/s" in stdout and "n/a (GPUs only)" in stdout


def test_help_explains_every_option():
    help_text = bench.build_parser().format_help()
    for option in ("--devices", "--workloads", "--implementations", "--quick", "--out",
                   "--cudnn-benchmark", "--warmup", "--steps", "--conv-batch"):  # fmt: skip
        assert option in help_text


def test_ddp_ranks_split_the_batch_like_chunk():
    import torch

    for batch, world in ((10, 4), (9, 8), (64, 2), (5, 1)):
        sizes = [share(batch, world, rank) for rank in range(world)]
        chunks = [len(c) for c in torch.arange(batch).chunk(world)]
        assert sizes[: len(chunks)] == chunks and sum(sizes) == batch


@pytest.mark.gpu
def test_quick_bench_on_gpus(tmp_path):
    report, _ = _bench(tmp_path, "--devices", "1,2", "--cudnn-benchmark", "off", gpus=True)
    assert " x " in report["meta"]["hardware"]["label"]
    rows = [r for r in report["results"] if r["devices"] == 2]
    assert {r["implementation"] for r in rows} == {"learn_parallel", "torch_dp", "ddp"}
    assert all(r["status"] == "ok" and r["step_ms"] > 0 for r in rows), rows
    timeline = Timeline.from_dict(report["timelines"][-1]["timeline"])
    assert "host" in timeline.devices() and set(timeline.clocks.values()) == {"host", "cuda-event"}


def test_simulate_on_a_gpu_host_benchmarks_simulated_devices(monkeypatch, tmp_path):
    """LEARN_PARALLEL_SIMULATE=1 (set for every non-GPU test) wins over visible GPUs."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host, not hidden
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    built = []

    def build_model(workload, seed=0):
        built.append(bench_build_model(workload, seed))
        return built[-1]

    bench_build_model = bench.build_model
    monkeypatch.setattr(bench, "build_model", build_model)
    options = ["--quick", "--workloads", "mlp", "--devices", "1,2", "--timeline-steps", "1"]
    options += ["--implementations", "single,learn_parallel,torch_dp", "--no-plots"]
    args = bench.build_parser().parse_args([*options, "--no-progress", "--out", str(tmp_path)])
    report = bench.run(bench.settings_from_args(args))

    status = {(r["implementation"], r["devices"]): r["status"] for r in report["results"]}
    assert status == {
        ("single", 1): "ok",
        ("learn_parallel", 1): "ok",
        ("learn_parallel", 2): "ok",
        ("torch_dp", 1): "not applicable",
        ("torch_dp", 2): "not applicable",
    }, report["results"]
    assert report["meta"]["hardware"]["label"] == "4 simulated CPU devices"
    assert built and all(next(m.parameters()).device.type == "sim" for m in built)
    rows = {row for t in report["timelines"] for row in Timeline.from_dict(t["timeline"]).devices()}
    assert rows == {"sim:0", "sim:1"}
