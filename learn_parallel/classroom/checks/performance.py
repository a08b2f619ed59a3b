"""Checks for the performance chapter."""

from __future__ import annotations

from learn_parallel.classroom import exercise, grading
from learn_parallel.lab.timeline import Hardware, PhaseRecord, Timeline


@exercise("perf-efficiency", "Parallel efficiency")
def efficiency(fn) -> str:
    rows = [
        {"implementation": "single", "devices": 1, "status": "ok", "samples_per_s": 100.0},
        {"implementation": "x", "devices": 1, "status": "ok", "samples_per_s": 90.0},
        {"implementation": "x", "devices": 2, "status": "ok", "samples_per_s": 150.0},
        {"implementation": "x", "devices": 4, "status": "failed", "samples_per_s": None},
        {"implementation": "y", "devices": 2, "status": "ok", "samples_per_s": 40.0},
    ]
    expected = {1: 0.9, 2: 0.75}
    if grading():
        rows.append({"implementation": "x", "devices": 8, "status": "ok", "samples_per_s": 400.0})
        expected[8] = 0.5
    got = fn(rows, "x")
    assert set(got) == set(expected) and all(abs(got[n] - e) < 1e-9 for n, e in expected.items()), (
        f"expected {expected}, got {got}"
    )
    return str(got)


@exercise("perf-forward-share", "The forward pass's share")
def forward_share(fn) -> str:
    records = [
        PhaseRecord("sim:0", "scatter", 0.0, 1.0, 0),
        PhaseRecord("sim:0", "forward", 1.0, 2.0, 0),
        PhaseRecord("sim:0", "scatter", 10.0, 11.0, 1),
        PhaseRecord("sim:0", "forward", 11.0, 14.0, 1),
        PhaseRecord("sim:0", "gather", 15.0, 16.0, 1),  # 1 ms idle before it
        PhaseRecord("sim:1", "forward", 11.0, 12.0, 1),
    ]
    fake = Timeline(Hardware("sim", 2, ["sim"] * 2, "test"), records, {"sim:0": "host"})
    got = fn(fake, "sim:0")
    assert abs(got - 0.5) < 1e-9, (
        f"expected 0.5 (3 ms of forward in a step that spans 6 ms, idle time included), got {got}"
    )
    got = fn(fake, "sim:1")
    assert abs(got - 1.0) < 1e-9, (
        f"sim:1 only ran forward in the last step: expected 1.0, got {got}"
    )
    return "0.5 and 1.0 on a made-up timeline"
