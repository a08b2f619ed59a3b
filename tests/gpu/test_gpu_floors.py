"""The floors driver on real GPUs (two or more): `pytest -m gpu`.

It runs ``python -m experiments.floors --quick`` in a fresh process (so no profiler has run
in the process that times; the quick sizes keep it to seconds), then reads the file back as
the chapters do: stamped like every recording, a rate for every pair of GPUs, NCCL's bus
bandwidth related to its time as nccl-tests define it, positive throughputs, and the counts
of the benchmark's workloads at every device count the recordings use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learn_parallel.lab import floors

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("floors")
    env = {k: v for k, v in os.environ.items() if k != "LEARN_PARALLEL_SIMULATE"}
    done = subprocess.run(
        [sys.executable, "-m", "experiments.floors", "--out", str(out / "gpus"), "--quick"],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "gpus" / "floors.json").read_text()), out


def test_the_recording_is_stamped_and_names_its_gpus(recorded):
    record, _ = recorded
    n = torch.cuda.device_count()
    assert record["commit"] and record["measured"] and record["date"]
    assert record["machine"].startswith(f"{n} x ") and record["hardware"]["device_count"] == n
    assert "experiments/floor_counts.py" in record["measured"]


def test_every_pair_and_the_host_have_a_rate(recorded):
    copies = recorded[0]["copies"]
    n = torch.cuda.device_count()
    assert len(copies["pairs_gb_s"]) == n and all(len(row) == n for row in copies["pairs_gb_s"])
    rates = [v for row in copies["pairs_gb_s"] for v in row]
    rates += copies["into_gb_s"] + copies["h2d_gb_s"] + copies["d2h_gb_s"]
    assert all(0 < v < 1e5 for v in rates), rates  # GB/s: positive, below 100 TB/s
    assert all(len(s) == 5 and min(s) > 0 for row in copies["pairs_ms"] for s in row)


def test_bus_bandwidth_is_algorithm_bandwidth_times_the_nccl_tests_factor(recorded):
    coll = recorded[0]["collectives"]
    n = coll["devices"]
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}
    for kind, f in factor.items():
        for row in coll[kind]:
            median = sorted(row["ms"])[len(row["ms"]) // 2]
            assert row["algbw_gb_s"] == pytest.approx(row["bytes"] / (median * 1e-3) / 1e9)
            assert row["busbw_gb_s"] == pytest.approx(row["algbw_gb_s"] * f)
        smallest, largest = (sorted(coll[kind][k]["ms"])[2] for k in (0, -1))
        assert largest > smallest, (kind, smallest, largest)  # 4 MiB take longer than 1 KiB


def test_throughputs_and_counts_are_there(recorded):
    from experiments.floor_counts import (
        device_counts,
    )  # imports the lab's measure: not at collection

    record, _ = recorded
    for op in [record["compute"]["matmul"], *record["compute"]["convolutions"]]:
        assert op["flops"] > 0 and op["tflop_s"] > 0.1, op
    assert record["compute"]["conv"] in record["compute"]["convolutions"]  # the fastest
    n = torch.cuda.device_count()
    for problem in ("mlp", "conv", "training", "replicate_copy", "gather_targets"):
        by_devices = record["counts"][problem]["by_devices"]
        assert sorted(map(int, by_devices)) == device_counts(n)
    assert record["counts"]["conv"]["by_devices"][str(n)]["flops"]["forward"]["conv"] > 0


def test_the_chapters_read_it_back(recorded, monkeypatch):
    _, out = recorded
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(out))
    found = floors.load("gpus")
    n = found.devices
    assert n == torch.cuda.device_count()
    assert found.phase("mlp", n, "replicate").ms > 0 and found.phase("mlp", n, "forward").ms > 0
    assert found.step("conv", n, "kept_replicas")[0] > found.step("conv", n, "ddp")[0]
    assert floors.describe(found).startswith(found.label)
