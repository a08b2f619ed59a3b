"""Nothing is timed in a process where the lab's profiler has run (CUPTI can stay loaded after it).

What these prove: every timer of the lab refuses, with the reason and the fix, once the
lab's one way into torch.profiler (`trace.profiler`) has run, and times the profiled work
itself only while a profiler runs; a failed row does not hide the refusal; no other code
makes a profiler, and only the tax experiment may time after one. Then every driver runs
its own code path on simulated devices while a spy notes, for each timing, whether a
profiler had run before it: each driver profiles (where it does at all) only after
everything it times.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from experiments import benchmark, measure, persistent_workers, recorder_cost, timeline_check
from experiments import ladder as ladder_driver
from learn_parallel.devices import Device
from learn_parallel.lab import ddp_timeline, ladder, measurement, trace, workloads
from learn_parallel.lab.steps import failure_becomes_row
from learn_parallel.lab.timing import Recorder, step_times_ms

ROOT = Path(__file__).resolve().parents[2]
DEVICES = [Device("sim", 0), Device("sim", 1)]
REFUSED = "profiler .* has already run in this process, and CUPTI can stay loaded"


def _profile_once() -> None:
    with trace.profiler(cuda=False):
        torch.ones(2).sum()


TIMERS = {
    "step_times_ms": lambda: step_times_ms(lambda: None, DEVICES, 0, 1),
    "Recorder": lambda: Recorder(devices=DEVICES).start(),
    "median_ms": lambda: measurement.median_ms(lambda: None, DEVICES[0], repeats=1),
    "wall_ms": lambda: measurement.wall_ms(lambda: None, DEVICES, repeats=1),
    "replicate_host_ms": lambda: ladder.replicate_host_ms(
        workloads.standard_workloads("quick")["mlp"], 2, repeats=1
    ),
}


@pytest.mark.parametrize("timer", list(TIMERS))
def test_every_timer_refuses_once_a_profiler_has_run(timer):
    TIMERS[timer]()  # fine before
    if timer == "Recorder":
        from learn_parallel.lab import timing

        timing._active.stop()
    _profile_once()
    with pytest.raises(trace.ProfiledProcessError, match=REFUSED) as refused:
        TIMERS[timer]()
    assert "kernels.ProfiledPass" in str(refused.value)  # and the way out
    assert "processes.run_ranks" in str(refused.value)


def test_the_profiled_work_itself_is_timed_while_a_profiler_runs():
    _profile_once()
    with trace.profiler(cuda=False):
        assert len(step_times_ms(lambda: None, DEVICES, 0, 2)) == 2
    with trace.measuring_the_tax():  # the tax experiment, on purpose
        assert len(step_times_ms(lambda: None, DEVICES, 0, 1)) == 1


def test_a_failed_row_does_not_hide_the_refusal():
    _profile_once()
    row = {"status": "ok"}
    with pytest.raises(trace.ProfiledProcessError), failure_becomes_row(row):
        step_times_ms(lambda: None, DEVICES, 0, 1)
    assert row["status"] == "ok"


def _files_where(found) -> list[str]:
    """Files of the package and the drivers with a node for which ``found(node)`` holds."""
    paths = sorted([*ROOT.glob("learn_parallel/**/*.py"), *ROOT.glob("experiments/*.py")])
    return [
        str(path.relative_to(ROOT))
        for path in paths
        if any(found(node) for node in ast.walk(ast.parse(path.read_text())))
    ]


def _makes_a_profiler(node: ast.AST) -> bool:
    """``from torch.profiler import profile`` or ``<...profiler>.profile``: a profiler session."""
    if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("profiler"):
        return any(alias.name == "profile" for alias in node.names)
    if isinstance(node, ast.Attribute) and node.attr == "profile":
        return ast.unparse(node.value).endswith("profiler")
    return False


def test_one_way_into_the_profiler_and_one_experiment_that_times_after_it():
    assert _files_where(_makes_a_profiler) == ["learn_parallel/lab/trace.py"]
    uses = lambda node: getattr(node, "attr", getattr(node, "id", "")) == "measuring_the_tax"  # noqa: E731
    assert _files_where(uses) == ["experiments/profiler_tax.py"]


@pytest.fixture
def spy(monkeypatch):
    """Each timing, with whether a profiler had run before it and whether one runs now."""
    seen: list[tuple[str, bool, bool]] = []
    original = trace.refuse_after_profiler

    def noted(what: str) -> None:
        running = torch.autograd.profiler._is_profiler_enabled
        seen.append((what, trace.has_profiled(), running))
        original(what)

    monkeypatch.setattr(trace, "refuse_after_profiler", noted)
    return seen


def _ranks(fn, world, args=(), backend="gloo", timeout_s=0, threads=None, with_times=False):
    """run_ranks without processes: what the ranks do is not this process's timing."""
    config = args[0]
    entry = {"step_ms_all": [1.0], "step_ms": 1.0}
    rank = {
        "workloads": {
            k: {"ours": entry, "torch": entry, "timeline": []} for k in config["workloads"]
        },
        "device_name": "CPU process",
    }
    return [rank] * world, [{"started_s": 0.0, "joined_s": 0.0}] * world


def _run_driver(name: str, out: Path, monkeypatch) -> None:
    quick = ["--out", str(out), "--devices", "2"]
    if name == "ladder":
        argv = [*quick, "--quick", "--steps", "1", "--warmup", "0", "--repeats", "2"]
        assert ladder_driver.main([*argv, "--workloads", "mlp", "--no-ddp"]) == 0
    elif name == "clone":
        argv = [*quick, "--quick", "--set", "clone", "--steps", "1", "--warmup", "0"]
        assert ladder_driver.main([*argv, "--repeats", "1", "--workloads", "mlp"]) == 0
    elif name == "bench":
        chosen = ["single", "learn_parallel", "torch_dp", "replicated"]
        settings = benchmark.settings(
            quick=True, devices=[1, 2], workloads=["mlp"], implementations=chosen
        )
        settings.trace = out / "trace.json"
        benchmark.run(settings)
        assert (out / "trace-mlp-learn_parallel-2.json").is_file()
    elif name == "measure":  # one of its measurements, then its timelines and their pass
        monkeypatch.setattr(measure, "MEASUREMENTS", {"matmul": measure.MEASUREMENTS["matmul"]})
        assert measure.main(quick) == 0
    elif name == "ddp":
        monkeypatch.setattr(ddp_timeline, "run_ranks", _ranks)
        small = {"mlp": workloads.standard_workloads("quick")["mlp"]}
        ddp_timeline.compare(small, 2, warmup=0, steps=1, timeline_steps=1, gpu_work=True)
    elif name == "recorder":
        argv = [*quick, "--steps", "1", "--workloads", "mlp"]
        assert recorder_cost.main(argv) == 0
    elif name == "workers":
        persistent_workers.run(DEVICES, 1, out)
    elif name == "timeline":
        assert timeline_check.main([*quick, "--steps", "1", "--workloads", "mlp"]) == 0


PROFILING = ["ladder", "clone", "bench", "measure", "ddp", "recorder", "workers"]


@pytest.mark.parametrize("name", [*PROFILING, "timeline"])
def test_each_driver_times_everything_before_it_profiles(name, tmp_path, monkeypatch, spy):
    _run_driver(name, tmp_path, monkeypatch)
    assert spy, "the driver timed nothing"
    after = [(what, running) for what, profiled, running in spy if profiled]
    assert all(running for _, running in after), f"timed after a profiler: {after}"
    assert trace.has_profiled() == (name in PROFILING)
    written = [json.loads(p.read_text()) for p in tmp_path.glob("*.json") if "trace" not in p.name]
    assert all(w.get("ran_beside", None) is None for w in written)  # no recording script here


def test_the_tax_experiment_times_after_a_profiler_only_on_purpose():
    from experiments import profiler_tax

    config = {"devices": 2, "workload": "mlp", "quick": True, "steps": 1, "warmup": 0}
    medians = profiler_tax.one_round(0, 1, config | {"taxed": True})
    assert trace.has_profiled() and all(isinstance(ms, float) for ms in medians.values())
    assert {"torch_dp", "lean_replicate"} <= set(medians) and "cuda_graphs" not in medians
    with pytest.raises(trace.ProfiledProcessError):  # outside measuring_the_tax: refused
        step_times_ms(lambda: None, DEVICES, 0, 1)
    rows = {name: {"clean": [2.0, 2.2], "taxed": [3.0, 3.1]} for name in ("a",)}
    assert profiler_tax.table(rows).splitlines()[-1] == (
        "| a | 2.10 ms (2.00-2.20) | 3.05 ms (3.00-3.10) | slower |"
    )
