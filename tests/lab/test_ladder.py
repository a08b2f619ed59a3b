"""The ladder driver: interleaved rounds, rows with their spread, DDP through run_ranks.

A quick run on simulated devices writes every rung (the CUDA-graph ones as not applicable;
torch's DataParallel runs there too), each row with one median per round and their min /
median / max; the rounds really interleave the rungs, with DDP's processes once per round;
the verdict rule calls a difference inside the rounds' range a tie; the plot draws that
range.
"""

import json
import warnings

import matplotlib
import pytest

from experiments import ladder as driver
from learn_parallel.lab import bridges, ladder, ladder_rungs
from learn_parallel.lab.ladder_rungs import DDP_ROWS, MEASURED

matplotlib.use("Agg")

CUDA_ONLY = {r.name for r in MEASURED if r.needs_cuda}
TORCH_FORWARD = {"torch_dp", "persistent_workers"}  # torch.nn.DataParallel's own forward


def quick(tmp_path, *extra):
    argv = ["--out", str(tmp_path), "--quick", "--steps", "2", "--warmup", "1"]
    assert driver.main([*argv, "--workloads", "mlp", *extra]) == 0
    return json.loads((tmp_path / "ladder.json").read_text())


def test_quick_run_writes_every_rung_with_its_rounds(tmp_path):
    report = quick(tmp_path, "--no-ddp", "--repeats", "2", "--timeline-steps", "1")
    rows = {r["rung"]: r for r in report["rows"]}
    assert list(rows) == [r.name for r in MEASURED]
    names = set(rows)
    for name, row in rows.items():
        assert row["below"] is None or row["below"] in names
        if name in CUDA_ONLY:
            assert (row["status"], row["note"]) == ("not applicable", "needs CUDA GPUs")
            continue
        assert row["status"] == "ok", row["note"]
        assert len(row["repeats"]) == 2 and [len(s) for s in row["step_ms_all"]] == [2, 2]
        assert row["step_ms_min"] <= row["step_ms"] <= row["step_ms_max"]
        assert sorted(row["repeats"]) == [row["step_ms_min"], row["step_ms_max"]]
        assert 0 < row["host_ms"] <= row["step_ms"]  # the host time until the step returned
        if name in TORCH_FORWARD:  # torch's DataParallel.forward marks no phases
            assert "timeline" not in row and "phase_ms" not in row
            continue
        assert row["timeline"]["records"], name  # every rung we built marks its phases
        assert len(row["phase_ms"]) == 2 and "forward" in row["phase_ms"][0]  # one per round
    assert report["schema"] == "learn_parallel.lab.ladder/3" and report["repeats"] == 2
    assert report["clock"] == "host clock" and "profiled repeat" in report["gpu_work"]


def test_rounds_interleave_the_rungs_with_ddp_once_per_round(tmp_path, monkeypatch):
    calls = []

    def fake_round(row, rung, workload, count, warmup, steps, timeline_steps, later=None):
        calls.append(rung.name)
        row["repeats"].append(1.0)
        row["step_ms_all"].append([1.0])
        row["host_ms_repeats"].append(1.0)

    monkeypatch.setattr(ladder, "measure_round", fake_round)
    monkeypatch.setattr(ladder, "ddp_round", lambda *args: calls.append("ddp"))
    workloads = ladder.default_workloads(False, quick=True)[1:]
    ladder.run("ladder", workloads, 2, tmp_path, repeats=3, ddp=lambda *a, **k: {}, progress=False)
    eager = [r.name for r in MEASURED if not r.measure_last]
    last = [r.name for r in MEASURED if r.measure_last]
    assert calls == (eager + ["ddp"] + last) * 3


def test_ddp_rows_come_from_run_ranks_processes(tmp_path):
    report = quick(tmp_path, "--repeats", "1")
    rows = {r["rung"]: r for r in report["rows"]}
    assert set(DDP_ROWS) <= set(rows)
    assert rows["ddp"]["status"] == "ok", rows["ddp"]["note"]
    assert len(rows["ddp"]["repeats"]) == 1 and len(rows["ddp"]["step_ms_all"][0]) == 2
    assert rows["ddp_graphs"]["status"] == "not applicable"  # gloo processes: no CUDA graphs


def _row(rung, repeats, below=None):
    median = sorted(repeats)[len(repeats) // 2]
    row = {"rung": rung, "workload": "mlp", "status": "ok", "note": "", "below": below}
    return {**row, "repeats": repeats, "step_ms": median}


def test_verdict_calls_a_difference_inside_the_rounds_range_a_tie():
    low, high = _row("a", [10.0, 10.1, 10.2, 10.3, 10.4]), _row("b", [10.3, 10.4, 10.5, 10.6, 10.6])
    assert bridges.verdict(low, high) == bridges.verdict(high, low) == "tie"  # ranges overlap
    fast = _row("c", [9.0, 9.05, 9.1, 9.15, 9.2])
    assert bridges.verdict(fast, high) == "faster" and bridges.verdict(high, fast) == "slower"
    old = {"rung": "d", "step_ms": 8.0}  # recorded before rounds existed: one median
    assert bridges.verdict(old, high) == "no verdict (1 round)"


def test_verdict_gives_none_from_fewer_than_five_rounds():
    few, high = _row("a", [9.0, 9.1, 9.2, 9.3]), _row("b", [10.3, 10.4, 10.5, 10.6, 10.6])
    assert bridges.ENOUGH_ROUNDS == 5
    assert bridges.verdict(few, high) == bridges.verdict(high, few) == "no verdict (4 rounds)"
    assert bridges.verdict(_row("c", [*few["repeats"], 9.4]), high) == "faster"  # five: enough


def test_table_gives_each_rung_its_spread_ratio_and_verdicts():
    report = {
        "set": "ladder",
        "hardware": {"label": "2 x test GPU"},
        "workloads": {"mlp": {"title": "MLP"}},
        "rows": [
            _row("own_optimizers", [12.0, 12.25, 12.5, 12.75, 13.0]),
            _row("per_device_inputs", [9.0, 9.25, 9.5, 9.75, 10.0], below="own_optimizers"),
            _row("ddp", [9.8, 9.9, 10.0, 10.1, 10.2]),
            {"rung": "ddp_graphs", "workload": "mlp", "status": "failed", "note": "refused\nx"},
        ],
    }
    table = bridges.ladder_table(report)
    assert "per_device_inputs           9.50 ms (9.00-10.00)  0.95 x DDP" in table
    assert "faster vs own_optimizers, tie vs ddp" in table
    assert "own_optimizers             12.50 ms (12.00-13.00)  1.25 x DDP, slower vs ddp" in table
    assert "ddp_graphs              failed: refused" in table
    two = report | {"rows": [r | {"repeats": r["repeats"][:2]} for r in report["rows"][:3]]}
    table = bridges.ladder_table(two)  # the ranges still do not overlap: no verdict from two
    assert "no verdict (2 rounds) vs own_optimizers, no verdict (2 rounds) vs ddp" in table
    assert not any(word in table for word in ("faster", "slower", "tie"))


def test_timing_of_leaves_out_the_bars_of_a_run_that_recorded_no_timeline(tmp_path, monkeypatch):
    def fake_round(row, rung, workload, count, warmup, steps, timeline_steps, later=None):
        row["repeats"].append(1.0)
        row["step_ms_all"].append([1.0])
        row["host_ms_repeats"].append(1.0)

    monkeypatch.setattr(ladder, "measure_round", fake_round)
    workloads = ladder.default_workloads(False, quick=True)[1:]
    timings = {}
    for steps in (0, 3):
        run = {"repeats": 1, "timeline_steps": steps, "progress": False}
        report = ladder.run("ladder", workloads, 2, tmp_path, **run)
        timings[steps] = (report["timing"], bridges.timing_of(report))
    (plain, said), (kept, same) = timings[0], timings[3]
    assert "then 0 steps recorded per device, whose mean bar" in plain
    assert "mean bar" not in said and "; no timeline recorded; host_ms: " in said
    no_ddp = " (DDP: the slowest rank per step)"  # the run has no DDP row: its clause goes too
    assert no_ddp in plain and no_ddp not in said
    assert said.startswith(plain.partition("; then 0 steps")[0].replace(no_ddp, ""))
    assert (
        same == kept.replace(no_ddp, "")
        and "then 3 steps recorded per device, whose mean bar per phase" in kept
    )


def test_timing_of_names_ddp_only_where_a_ddp_row_ran():
    timing = "a synchronize of every device (DDP: the slowest rank per step); a row's repeats"
    rows = [_row("broadcast", [1.0]), _row("clone", [2.0])]
    assert bridges.timing_of({"timing": timing, "rows": rows}) == (
        "a synchronize of every device; a row's repeats"
    )
    assert bridges.timing_of({"timing": timing, "rows": [*rows, _row("ddp", [1.0])]}) == timing


def test_plot_draws_each_rounds_range():
    report = {
        "hardware": {"label": "2 x test GPU", "device_type": "cuda"},
        "workloads": {"mlp": {"title": "MLP"}},
        "rows": [_row("own_optimizers", [12.0, 13.0]), _row("ddp", [9.0, 10.0])],
    }
    ax = bridges.plot_ladder(report, "mlp", "test").axes[0]
    whiskers = [line.get_ydata() for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert sorted(map(list, whiskers)) == [[9.0, 10.0], [12.0, 13.0]]
    assert [t.get_text() for t in ax.texts] == [
        "1.30x",
        "1.00x",
    ]  # 13 / 10: medians of two take the upper


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--steps", "0"]])
def test_driver_refuses_empty_rounds(tmp_path, argv):
    with pytest.raises(SystemExit):
        driver.main(["--out", str(tmp_path), "--quick", *argv])


def test_a_rung_that_warns_keeps_its_times_and_says_why_in_its_note():
    def make(workload, devices):
        def step():
            message = "capturing the step on sim:1 was refused (X); eagerly"
            warnings.warn(message, RuntimeWarning, stacklevel=2)

        return step, None

    rung = ladder_rungs.Rung("shaky", "a change", "none", False, make)
    row = ladder._row("shaky", "a change", "none", None, "mlp", 2)
    workload = ladder.default_workloads(False, quick=True)[1]
    for _ in range(2):
        ladder.measure_round(row, rung, workload, 2, warmup=0, steps=2, timeline_steps=0)
    assert row["status"] == "ok" and len(row["repeats"]) == 2
    assert row["note"] == "capturing the step on sim:1 was refused (X); eagerly"  # said once


def test_phase_lines_compare_each_phase_over_the_rounds():
    timeline = {"records": [{"device": "cuda:0", "phase": "backward", "step": 0, "gpu_ms": 2.0}]}
    below = _row("kept_replicas", [10.0, 10.5]) | {
        "phase_ms": [{"backward": ms} for ms in (5.0, 5.05, 5.1, 5.15, 5.2)]
    }
    rung = _row("overlap_reduce", [11.0, 11.5], below="kept_replicas")
    pairs = zip((6.0, 6.1, 6.2, 6.3, 6.4), (0.1, 0.125, 0.15, 0.175, 0.2))
    rung |= {"phase_ms": [{"backward": b, "reduce": r} for b, r in pairs]}
    report = {"rows": [below | {"timeline": timeline}, rung | {"timeline": timeline}]}
    lines = bridges.phase_lines(report, "mlp", "overlap_reduce", "kept_replicas")
    assert lines == [
        "  backward               5.10 (5.00-5.20) ->   6.20 (6.00-6.40) ms, slower;"
        " GPU work 2.00 -> 2.00",
        "  reduce                 0.00 (0.00-0.00) ->   0.15 (0.10-0.20) ms, slower;"
        " GPU work 0.00 -> 0.00 (NCCL kernel time, waits for peers included)",
    ]
    for row in report["rows"]:  # the same ranges from two rounds: no verdict
        row["phase_ms"] = [row["phase_ms"][0], row["phase_ms"][-1]]
    lines = bridges.phase_lines(report, "mlp", "overlap_reduce", "kept_replicas")
    assert [line.split(" ms, ")[1].split(";")[0] for line in lines] == ["no verdict (2 rounds)"] * 2
    del report["rows"][0]["phase_ms"]  # a recording made before the rounds kept their phases
    assert bridges.phase_lines(report, "mlp", "overlap_reduce", "kept_replicas") == []


def test_phase_lines_print_phases_under_a_tenth_of_a_ms_in_us_apart():
    """Bars whose ranges the verdict tells apart print apart: under 0.1 ms, in µs."""
    below = _row("kept_replicas", [10.0, 10.5]) | {
        "phase_ms": [{"optimizer": ms} for ms in (0.02286, 0.02299, 0.02315, 0.02318, 0.02335)]
    }
    rung = _row("overlap_reduce", [11.0, 11.5], below="kept_replicas")
    rung |= {"phase_ms": [{"optimizer": ms} for ms in (0.02342, 0.0235, 0.02352, 0.0236, 0.0237)]}
    (line,) = bridges.phase_lines({"rows": [below, rung]}, "mlp", "overlap_reduce", "kept_replicas")
    assert line == "  optimizer             23.15 (22.86-23.35) ->  23.52 (23.42-23.70) µs, slower"


def test_phase_lines_call_gpu_work_nccl_time_only_where_the_rungs_phase_runs_nccl():
    """The kept replicas' ``replicate`` is `KeptReplicas.refresh` (peer copies, no NCCL);
    `ReplicatedStep`'s ``broadcast buffers`` and the DataParallel rungs' ``replicate`` are NCCL."""
    marks = {"replicate": ["lean_replicate", "kept_replicas", "overlap_reduce"]}
    marks["broadcast buffers"] = ["own_optimizers", "all_reduce_in_backward"]
    report = {"rows": []}
    for phase, rungs in marks.items():
        timeline = {"records": [{"device": "cuda:0", "phase": phase, "step": 0, "gpu_ms": 1.0}]}
        for name in rungs:
            row = _row(name, [1.0, 1.0]) | {"phase_ms": [{phase: 1.0}] * 2, "timeline": timeline}
            report["rows"].append(row)

    def caveat(rung, below):
        (line,) = bridges.phase_lines(report, "mlp", rung, below)
        return line.partition("GPU work 1.00 -> 1.00")[2]

    assert caveat("overlap_reduce", "kept_replicas") == ""
    nccl = " (NCCL kernel time, waits for peers included)"
    assert caveat("all_reduce_in_backward", "own_optimizers") == nccl
    mixed = " (lean_replicate's: NCCL kernel time, waits for peers included)"
    assert caveat("kept_replicas", "lean_replicate") == mixed
