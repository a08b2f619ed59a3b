"""The floors recording's logic on the CPU: counts from tensors, and floors read back.

What runs here without a GPU: `experiments.floor_counts` (bytes and FLOPs of a small model on
the meta device, against FLOPs worked out by hand in this test), the mirrors of the chapters'
measurements, the driver's refusal and its summary, and `learn_parallel.lab.floors` on a
synthetic ``floors.json`` written by the test (never shipped): each phase's floor, the
interpolation of NCCL's bandwidth, the ring factor, the table's verdicts and a rung's step
floor. The measurements themselves need GPUs: tests/gpu/test_gpu_floors.py runs them.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from torch import nn

from experiments import floor_counts
from experiments import floors as driver
from learn_parallel.lab import floors, measure
from learn_parallel.lab.ladder_rungs import DDP_ROWS, MEASURED
from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline

META = torch.device("meta")


def test_bytes_and_flops_are_counted_from_the_tensors():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(META)
    counts = floor_counts.data_parallel_counts((model, torch.empty(10, 8, device=META)), 4)
    assert counts["rows"] == [3, 3, 3, 1]  # chunk's pieces, as scatter cuts them
    assert counts["pieces"] == [3 * 8 * 4] * 3 + [8 * 4]
    assert counts["outputs"] == [3 * 4 * 4] * 3 + [4 * 4]
    assert counts["parameters"] == counts["gradients"] == (8 * 16 + 16 + 16 * 4 + 4) * 4
    assert counts["buffers"] == 0
    # By hand, for the largest piece (3 rows): 2 m n k per matrix product; backward makes
    # both weights' gradients and the second layer's input gradient, not the batch's.
    forward = 2 * 3 * 8 * 16 + 2 * 3 * 16 * 4
    assert counts["flops"]["forward"] == {"conv": 0, "matmul": forward}
    assert counts["flops"]["backward"] == {"conv": 0, "matmul": forward + 2 * 3 * 16 * 4}
    moved = floors.moved(counts)
    assert moved["scatter"] == [0, 96, 96, 32] and moved["gather"] == [0, 48, 48, 16]
    assert moved["replicate"] == [0] + [counts["parameters"]] * 3


def test_a_convolution_counts_as_convolution_and_buffers_are_counted():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(META)
    counts = floor_counts.data_parallel_counts((model, torch.empty(4, 3, 8, 8, device=META)), 2)
    assert counts["flops"]["forward"]["conv"] > 0 == counts["flops"]["forward"]["matmul"]
    assert counts["buffers"] == (4 + 4) * 4 + 8  # running mean and var, num_batches_tracked


@pytest.mark.parametrize("key", sorted(floor_counts.MIRRORS))
def test_the_chapter_problems_mirror_their_measurement_functions(key):
    function, line = floor_counts.MIRRORS[key]
    assert line in inspect.getsource(getattr(measure, function)), (
        f"measure.{function} no longer builds its problem with {line!r}: update "
        f"experiments/floor_counts.py's {key!r} to match"
    )
    counts = floor_counts.data_parallel_counts(floor_counts.chapter_problem(key), 2)
    assert counts["rows"] == [2048, 2048]  # each chapter problem splits a batch of 4096 rows


def test_the_driver_refuses_without_two_gpus_and_says_what_it_needs():
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs the driver needs")
    with pytest.raises(SystemExit, match="needs two or more CUDA GPUs"):
        driver.record(quick=True)


def _collective(factor: float) -> list[dict]:
    rows = []
    for k in range(10, 29, 2):  # 1 KiB .. 256 MiB, as the driver's sweep
        ms = 0.02 + 2**k / 200e9 * 1e3  # 20 µs of latency, then 200 GB/s
        algbw = 2**k / (ms * 1e-3) / 1e9
        rows.append({"bytes": 2**k, "ms": [ms], "algbw_gb_s": algbw, "busbw_gb_s": algbw * factor})
    return rows


def synthetic_record(counts: dict) -> dict:
    """A floors.json as the driver writes it, with made-up rates (never shipped)."""
    op = {"operation": "made up", "flops": 1, "ms": [1.0]}
    return {
        "hardware": {"label": "4 x Test GPU"},
        "date": "2026-01-01T00:00:00+00:00",
        "commit": "f" * 40,
        "copies": {
            "pairs_gb_s": [
                [900.0 if s == t else 300.0 + 10 * t for t in range(4)] for s in range(4)
            ],
            "into_gb_s": [400.0] * 4,
            "h2d_gb_s": [50.0] * 4,
            "d2h_gb_s": [40.0] * 4,
        },
        "collectives": {
            "devices": 4,
            "nccl_version": "2.0.0",
            "all_reduce": _collective(1.5),
            "broadcast": _collective(1.0),
            "reduce": _collective(1.0),
        },
        "compute": {
            "settings": {"dtype": "float32"},
            "matmul": op | {"tflop_s": 50.0},
            "conv": op | {"tflop_s": 100.0},
        },
        "counts": counts,
        "duration_s": 1.0,
        "measured": {},
    }


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(META)
    x = torch.empty(4096, 1024, device=META)
    by_devices = {str(n): floor_counts.data_parallel_counts((model, x), n) for n in (1, 2, 4)}
    fields = {"kind": "mlp", "batch": 4096, "width": 1024, "layers": 2, "image_size": 128}
    fields |= {"model": "mlp", "classes": 1000}
    record = synthetic_record({"mlp": {"workload": fields, "by_devices": by_devices}})
    (tmp_path / "test-x4").mkdir()
    (tmp_path / "test-x4" / "floors.json").write_text(json.dumps(record))
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))
    return floors.load("test-x4")


def test_each_phase_floor_is_its_bytes_over_its_rate(recorded):
    c = recorded.counts("mlp", 4)
    piece = c["pieces"][1]
    scatter = sum(piece / (gb * 1e9) for gb in (310.0, 320.0, 330.0)) * 1e3  # one after another
    assert recorded.phase("mlp", 4, "scatter").ms == pytest.approx(scatter)
    gather = recorded.phase("mlp", 4, "gather")
    assert gather.moved == 3 * c["outputs"][1]
    # copy_ serializes the copies into one GPU: each piece over its pair's rate (300 GB/s
    # into GPU 0 here), not over the rate of all of them at once (into_gb_s, 400)
    assert gather.ms == pytest.approx(gather.moved / 300e9 * 1e3)
    # NCCL at a measured size is that size's time; between two sizes it is interpolated
    assert recorded.collective_ms("broadcast", 2**20) == pytest.approx(0.02 + 2**20 / 200e9 * 1e3)
    low, high = (recorded.collective_ms("broadcast", 2**k) for k in (20, 22))
    assert low < recorded.collective_ms("broadcast", 3 * 2**20) < high
    size = c["parameters"] + c["buffers"]
    assert recorded.phase("mlp", 4, "replicate").ms == recorded.collective_ms("broadcast", size)
    assert recorded.phase("mlp", 4, "replicate").moved == 3 * size
    # the ring: the bus bandwidth turns back into time with 2 (n - 1) / n of the bytes
    g = c["gradients"]
    ring = 2 * 3 / 4 * g / (recorded.bus_gb_s("all_reduce", g) * 1e9) * 1e3
    assert recorded.phase("mlp", 4, "all-reduce").ms == pytest.approx(ring)
    flops = c["flops"]["forward"]["matmul"]
    assert recorded.phase("mlp", 4, "forward").ms == pytest.approx(flops / 50e12 * 1e3)
    parts = [recorded.phase("mlp", 4, p).ms for p in ("grad scatter", "replica backward", "reduce")]
    assert recorded.phase("mlp", 4, "backward").ms == pytest.approx(sum(parts))
    both = recorded.phase("mlp", 4, "forward+backward")  # a graph replaying both
    assert both.ms == pytest.approx(
        sum(recorded.phase("mlp", 4, p).ms for p in ("forward", "replica backward"))
    )
    assert recorded.phase("mlp", 4, "optimizer").ms is None  # not modelled
    assert recorded.phase("mlp", 2, "replicate").ms is None  # NCCL was measured on 4 GPUs
    said = floors.bound(recorded.phase("mlp", 2, "replicate"), 1.0, 0.5)
    assert said == "no floor here: the floors were not measured on this many GPUs"


def test_coalesced_broadcast_and_reduce_go_in_buckets_of_their_own(recorded, monkeypatch):
    """torch.cuda.comm sends at most `COALESCED` bytes per NCCL call: a floor adds one call
    per bucket, each at the rate for its size (smaller buckets run further from the peak)."""
    c = recorded.counts("mlp", 4)
    size = c["parameters"] + c["buffers"]
    monkeypatch.setattr(floors, "COALESCED", 2**20)
    buckets = [2**20] * (size // 2**20) + [size % 2**20]
    assert len(buckets) >= 3 and buckets[-1] > 0
    expected = sum(recorded.collective_ms("broadcast", b) for b in buckets)
    assert recorded.phase("mlp", 4, "replicate").ms == pytest.approx(expected)
    assert expected > recorded.collective_ms("broadcast", size)  # a bucket's fixed cost each
    reduce = sum(recorded.collective_ms("reduce", b) for b in _buckets(c["gradients"]))
    assert recorded.phase("mlp", 4, "reduce").ms == pytest.approx(reduce)


def _buckets(size: int) -> list[int]:
    return [2**20] * (size // 2**20) + ([size % 2**20] if size % 2**20 else [])


def test_the_table_says_what_bounds_each_bar(recorded):
    floor = recorded.phase("mlp", 4, "forward").ms
    scatter = recorded.phase("mlp", 4, "scatter").ms
    records = [
        PhaseRecord("cuda:0", "scatter", 0.0, 1.5 * scatter, 0, 1.4 * scatter),
        PhaseRecord("cuda:0", "forward", 1.0, 1.0 + 10 * floor, 0, floor),  # waits
        PhaseRecord("cuda:1", "forward", 1.0, 1.0 + 12 * floor, 0, 11 * floor),  # slow work
        PhaseRecord("cuda:0", "optimizer", 20.0, 21.0, 0, 0.5),
        *(PhaseRecord(f"cuda:{d}", "loss", 20.0, 20.1, 0, 0.0) for d in (2, 3)),  # 4 GPU rows
    ]
    hardware = Hardware("cuda", 4, ["Test GPU"] * 4, "2")
    timeline = Timeline(hardware, records, {"cuda:0": "cuda-event", "cuda:1": "cuda-event"})
    assert floors.bars(timeline)["forward"][0] == "cuda:1"  # the longest GPU bar
    text = floors.table(timeline, recorded, "mlp")
    assert "scatter (cuda:0): bounded by copies from the first GPU" in text
    assert "forward (cuda:1): bounded by its own GPU work, 11.0 x the floor" in text
    assert "optimizer (cuda:0): no floor here" in text
    assert "every row's GPU work in it" in text.split("scatter (cuda:0)")[1].splitlines()[0]
    assert "every row's GPU work" not in text.split("forward (cuda:1)")[1].splitlines()[0]
    # A copy's longest bar on a GPU that runs none of its copies: the verdict reads waits, and
    # every row's GPU work in the phase (cuda:0's copies) is set beside the floor too.
    waiting = PhaseRecord("cuda:2", "scatter", 0.0, 4 * scatter, 0, 0.0)
    text = floors.table(Timeline(hardware, [*records, waiting], timeline.clocks), recorded, "mlp")
    line = text.split("scatter (cuda:2): ")[1].splitlines()[0]
    assert line.startswith("bounded by waits") and "is 1.4 x the floor" in line
    # A rung names its phases' floors through FLOOR_NAMES: per_device_inputs's scatter has none.
    renamed = floors.table(timeline, recorded, "mlp", rung="per_device_inputs")
    assert "scatter (cuda:0): no floor here: in this rung it moves nothing between" in renamed
    assert "optimizer (cuda:0): no floor here" in renamed
    assert floors.FLOOR_NAMES["kept_replicas"]["replicate"] == "refresh"  # peer copies, no NCCL
    assert "refresh" in floors.STEP_PATH["kept_replicas"] and "refresh" in floors.HOW
    forward = floors.Floor("forward", floor)
    assert floors.bound(forward, 10 * floor, floor).startswith("bounded by waits")
    assert floors.bound(forward, 10 * floor, None).startswith("above its floor")
    # Below its floor, a bar shows the floor's model failing at that size: it bounds nothing.
    assert floors.bound(forward, 0.6 * floor, floor).startswith("below its floor (0.6 x)")
    # A collective's GPU work, NCCL kernel time, counts its wait for the peers' kernels: where
    # it fills most of the bar, it cannot tell that wait from transfer ...
    reduce = recorded.phase("mlp", 4, "reduce")
    said = floors.bound(reduce, 10 * reduce.ms, 8 * reduce.ms)
    assert said.startswith("above its floor (10.0 x)") and "cannot tell waits from transfer" in said
    # ... but under half the bar, the stream sat idle outside its kernels: bounded by waits.
    said = floors.bound(reduce, 10 * reduce.ms, reduce.ms)
    assert said.startswith("bounded by waits outside its NCCL kernels, not by NCCL reduces")
    assert f"worked {reduce.ms:.3f} ms (NCCL kernel time) of the {10 * reduce.ms:.3f} ms" in said
    for gpu in (4.9, 5.0):  # the line between the two: half the bar
        said = floors.bound(reduce, 10 * reduce.ms, gpu * reduce.ms)
        assert said.startswith("bounded by waits" if gpu < 5 else "above its floor"), said
    # A copy's GPU work under half its bar says waits, with no word of NCCL.
    copy = floors.bound(recorded.phase("mlp", 4, "gather"), 1.0, 0.1)
    assert copy.startswith("bounded by waits, not by copies") and "NCCL" not in copy
    assert floors.bound(reduce, 1.5 * reduce.ms, 20 * reduce.ms).startswith("bounded by NCCL")


def test_a_rungs_step_floor_adds_what_its_design_does_not_overlap(recorded):
    # every row the ladder measures (its rungs and the reference) and DDP's rows
    assert set(floors.STEP_PATH) == {r.name for r in MEASURED} | set(DDP_ROWS)
    dp, parts = recorded.step("mlp", 4, "torch_dp")
    assert dp == pytest.approx(sum(parts.values()))
    assert recorded.step("mlp", 4, "ddp")[0] == pytest.approx(parts["compute"])  # no buffers
    # our forward around torch's replicate moves what torch's DataParallel moves, unoverlapped
    assert recorded.step("mlp", 4, "our_forward") == (dp, parts)
    # kept replicas use no NCCL: refresh copies from the first GPU, the sum copies into it
    kept, copied = recorded.step("mlp", 4, "kept_replicas")
    overlapped, _ = recorded.step("mlp", 4, "overlap_reduce")
    assert set(copied) == {"compute", "scatter", "refresh", "gather", "grad scatter", "sum"}
    assert kept - overlapped == pytest.approx(copied["sum"])
    c = recorded.counts("mlp", 4)
    size = c["parameters"] + c["buffers"]
    from_first = sum(size / (gb * 1e9) for gb in (310.0, 320.0, 330.0)) * 1e3
    assert copied["refresh"] == pytest.approx(from_first)
    assert copied["sum"] == pytest.approx(3 * c["gradients"] / 300e9 * 1e3)  # 300 GB/s into 0
    # the reference all-reduces after backward, as step_graphs does; nothing scattered (and
    # this MLP has no buffers)
    reference, by_part = recorded.step("mlp", 4, "one_thread_reference")
    assert set(by_part) == {"compute", "buffers", "all-reduce"}
    assert reference == pytest.approx(parts["compute"] + by_part["all-reduce"])
    assert (reference, by_part) == recorded.step("mlp", 4, "step_graphs")
    assert recorded.step("mlp", 4, "no such rung") is None
    fields = recorded.record["counts"]["mlp"]["workload"]
    assert recorded.problem_for(fields | {"title": "a ladder's workload"}) == "mlp"
    assert recorded.problem_for(fields | {"batch": 8}) is None
    assert recorded.problem_for("MLP 2 x 1024, batch 4096 x 1024") == "mlp"


def test_the_summaries_read_the_record(recorded):
    text = floors.describe(recorded)
    assert text.startswith("4 x Test GPU, 2026-01-01, commit fffffff")
    assert "all_reduce: 1 KiB" in text and "matmul: 50.0 TFLOP/s" in text
    assert "300-330 GB/s (12 pairs)" in text
    log = driver.summary(recorded.record)
    assert "all_reduce 256 MiB: bus bandwidth" in log and "conv made up: 100.0 TFLOP/s" in log


def test_no_floors_recorded_is_said_and_nothing_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))
    assert floors.load("test-x4") is None
    assert "No floors recorded for test-x4 yet" in capsys.readouterr().out
