"""The benchmark as a function: one device, both DataParallels and DDP, side by side.

``python -m experiments.bench`` is its command line (from a clone; the wheel ships neither);
what a run measures (`Settings`, `Group`) is in ``experiments/bench_settings.py``.

Every measurement is a full training step (`steps.train_step`) on synthetic data: warm-up
steps, then timed steps, each ended by a synchronize of every device; the median is
reported. A few more steps are recorded per device after the timed ones, so recording
never slows them; the GPU work inside their bars and the ``--trace`` files come from a
profiled pass after everything is timed. DDP runs one process per device. The performance
chapter reads its recorded ``bench.json``; its live cell uses ``measure.wrapper_scaling``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

# IMPLEMENTATIONS, settings and device_count_error: experiments/bench.py reads them here.
from experiments.bench_settings import IMPLEMENTATIONS as IMPLEMENTATIONS
from experiments.bench_settings import Group, Settings, groups_of, on_gpus
from experiments.bench_settings import settings as settings
from experiments.ddp_times import time_ddp
from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import device_count_error as device_count_error
from learn_parallel.devices import device_type, resolve_devices
from learn_parallel.lab import provenance
from learn_parallel.lab.ddp_timeline import choose_backend
from learn_parallel.lab.kernels import ProfiledPass
from learn_parallel.lab.ladder_rungs import replicated
from learn_parallel.lab.measurement import synced_clock
from learn_parallel.lab.processes import NCCL_ENV, RankFailed, share, use_nccl_settings
from learn_parallel.lab.steps import (
    failure_becomes_row,
    make_step,
    one_device,
    one_thread_per_device,
    record_timeline,
)
from learn_parallel.lab.timeline import Timeline, describe_hardware
from learn_parallel.lab.timing import step_times_ms
from learn_parallel.lab.trace import chrome_trace
from learn_parallel.lab.workloads import Workload, build_model, parameter_count

# Where a row ran (its "ran_on"): this process's devices (GPUs, or simulated devices on the
# CPU), or DDP's processes: one per GPU over NCCL, else plain CPU processes over gloo, since
# a DDP process has no simulated devices. Rows that ran on different kinds compare nothing.
RAN_ON = {
    "cuda": "GPUs",
    "sim": "simulated devices, threads of one process on the CPU",
    "cpu": "plain CPU processes, one per device, talking through gloo",
}
SCHEMA = "learn_parallel.lab.bench/1"  # unchanged since the module moved: old files read alike
WRAPPERS = {"single": one_device, "learn_parallel": DataParallel, "torch_dp": torch.nn.DataParallel}


def measure_in_process(
    implementation: str,
    group: Group,
    count: int,
    settings: Settings,
    parameters: dict[str, int] | None = None,
    later: ProfiledPass | None = None,
) -> tuple[dict[str, Any], Timeline | None]:
    """Time one implementation on ``count`` devices in this process; maybe record a timeline.

    ``parameters``, if given, receives the trained model's parameter count under the group's
    key; ``later`` gets the profiled work (the timeline's GPU work, a trace) to run after
    everything is timed.
    """
    row = _row(group, implementation, count)
    torch.backends.cudnn.benchmark = bool(group.cudnn_benchmark)
    timeline = None
    trace = settings.trace
    if trace and implementation != "single" and count == max(settings.devices):
        trace = trace.with_name(f"{trace.stem}-{group.key}-{implementation}-{count}.json")
        row["trace"] = trace.name
    else:
        trace = None
    with failure_becomes_row(row, limit=500):
        devices = resolve_devices(list(range(row["devices"])))  # single: one device
        step, model = make_step_of(implementation, group, devices, settings)
        if parameters is not None and model is not None:
            parameters[group.key] = parameter_count(model)
        row.update(_summary(step_times_ms(step, devices, settings.warmup, settings.steps), group))
        # torch's DataParallel marks no phases: its timeline would be empty.
        if implementation != "torch_dp" and settings.timeline_steps > 0:
            timeline = record_timeline(step, devices, settings.timeline_steps)
        again = partial(_step_again, implementation, group, devices, settings)
        if timeline is not None and later is not None and settings.gpu_work:
            later.gpu_work(timeline, again, devices, settings.timeline_steps, settings.warmup)
        if trace is not None and later is not None:
            later.add(partial(_traced, again, settings.warmup, trace))
    if row["status"] != "ok":
        row.pop("trace", None)
    return row, timeline


def make_step_of(
    implementation: str, group: Group, devices: list, settings: Settings
) -> tuple[Callable[[], None], torch.nn.Module | None]:
    """One training step of ``implementation`` on ``devices``, and its model where it has one."""
    torch.backends.cudnn.benchmark = bool(group.cudnn_benchmark)
    if implementation == "replicated":  # the ladder's top rung: DDP's shape, one process
        top = replicated(overlap=True, per_device_inputs=True, cuda_graphs=on_gpus())
        return top(group.workload, devices)[0], None
    wrap = WRAPPERS[implementation]
    step, _, model = make_step(group.workload, devices, wrap, settings.lr, settings.seed)
    return step, model


def _step_again(implementation, group, devices, settings) -> Callable[[], None]:
    return make_step_of(implementation, group, devices, settings)[0]


def _traced(again: Callable[[], Callable[[], None]], warmup: int, path: Path) -> None:
    """Two steps of a fresh ``again()`` (after ``warmup`` untimed ones) in a Chrome trace."""
    step = again()
    for _ in range(warmup):
        step()
    with chrome_trace(path):
        for _ in range(2):
            step()


def ddp_rows(count: int, groups: Sequence[Group], settings: Settings) -> list[dict[str, Any]]:
    """torch's DDP in ``count`` processes, one launch per cudnn.benchmark setting."""
    rows = {g.key: _row(g, "ddp", count) for g in groups}
    nccl = choose_backend(count)[0] == "nccl"
    backend = "NCCL" if nccl else "gloo, one CPU process per device"
    runnable = []
    for g in groups:
        rows[g.key].update(note=f"{count} process(es), {backend}", ran_on="cuda" if nccl else "cpu")
        if share(g.workload.batch, count, count - 1) == 0:  # the last rank would wait forever
            rows[g.key].update(
                status="failed",
                note=f"global batch {g.workload.batch} too small for {count} processes "
                f"(split like chunk, the last rank gets no rows)",
            )
        else:
            runnable.append(g)
    backend_name = choose_backend(count)[0]
    for mode in sorted({bool(g.cudnn_benchmark) for g in runnable}):
        launch = [g for g in runnable if bool(g.cudnn_benchmark) == mode]
        try:
            results = time_ddp(
                [g.workload for g in launch],
                count,
                settings.warmup,
                settings.steps,
                backend_name,
                settings.ddp_timeout,
                graphs=False,
                lr=settings.lr,
                seed=settings.seed,
                cudnn_benchmark=mode,
            )
        except RankFailed as error:
            for g in launch:
                rows[g.key].update(status="failed", note=str(error)[-800:])
            continue
        for g in launch:
            result = results[g.workload.kind]["ddp"]
            if result["status"] != "ok":
                rows[g.key].update(status="failed", note=result["note"])
            else:
                rows[g.key].update(_summary(result["step_ms_all"], g))
    return list(rows.values())


def run(
    settings: Settings,
    command_line: str = "",
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Measure everything ``settings`` asks for; return the report (``bench.json``'s content).

    ``progress(done, total, what)`` is called before each measurement.
    """
    threads = one_thread_per_device()
    if on_gpus():
        use_nccl_settings()  # torch's DataParallel and ours broadcast over NCCL
    groups = groups_of(settings)
    tasks = [
        (impl, group, n)
        for group in groups
        for n in settings.devices
        for impl in settings.implementations
        if impl not in ("single", "ddp") or (impl == "single" and n == settings.devices[0])
    ]
    ddp_counts = settings.devices if "ddp" in settings.implementations else []
    total = len(tasks) + len(ddp_counts) + 1
    results, timelines = [], []
    parameters: dict[str, int] = {}  # group key -> parameter count of the model it trained
    later = ProfiledPass()
    started = time.perf_counter()
    for done, (impl, group, n) in enumerate(tasks):
        if progress:
            progress(done, total, f"{group.key} {impl} {1 if impl == 'single' else n} dev")
        row, timeline = measure_in_process(impl, group, n, settings, parameters, later)
        results.append(row)
        if timeline is not None:
            where = {"group": group.key, "implementation": impl, "devices": row["devices"]}
            timelines.append({**where, "timeline": timeline})
    for done, n in enumerate(ddp_counts, len(tasks)):
        if progress:
            progress(done, total, f"ddp {n} processes")
        results += ddp_rows(n, groups, settings)
    if progress:
        progress(total - 1, total, f"profiled pass: {len(later.jobs)} jobs, after all timing")
    later.run()  # torch.profiler runs from here on: nothing below is timed
    for entry in timelines:
        entry["timeline"] = entry["timeline"].to_dict()
    return {
        "schema": SCHEMA,
        "meta": _metadata(settings, command_line, time.perf_counter() - started, threads),
        "groups": [
            {
                "key": g.key,
                "title": g.title(),
                "workload": g.workload.to_dict(),
                "cudnn_benchmark": g.cudnn_benchmark,
                "parameters": parameters.get(g.key) or _count_on_meta(g.workload, settings.seed),
            }
            for g in groups
        ],
        "results": results,
        "timelines": timelines,
    }


def _row(group: Group, implementation: str, count: int) -> dict[str, Any]:
    return {
        "group": group.key,
        "workload": group.workload.kind,
        "model": group.workload.model,
        "cudnn_benchmark": group.cudnn_benchmark,
        "implementation": implementation,
        "devices": 1 if implementation == "single" else count,
        "ran_on": device_type(),  # a key of RAN_ON; DDP's rows say where their processes ran
        "global_batch": group.workload.batch,
        "status": "ok",
        "note": "",
    }


def _summary(times: list[float], group: Group) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "step_ms": median,
        "step_ms_min": min(times),
        "step_ms_mean": statistics.fmean(times),
        "step_ms_all": times,
        "samples_per_s": group.workload.batch / (median / 1e3),
    }


def _count_on_meta(workload: Workload, seed: int) -> int:
    """The parameter count of a workload no in-process run trained (say, DDP only): built on
    the meta device, shapes without memory."""
    with torch.device("meta"):
        return parameter_count(build_model(workload, seed))


def _metadata(settings: Settings, command: str, seconds: float, threads: str) -> dict[str, Any]:
    used = resolve_devices(list(range(max(settings.devices))))
    return {
        **provenance.run_metadata(command),
        "hardware": describe_hardware(used).to_dict(),
        "cudnn_version": torch.backends.cudnn.version() if on_gpus() else None,
        "settings": {
            "devices": settings.devices,
            "implementations": settings.implementations,
            "warmup": settings.warmup,
            "steps": settings.steps,
            "timeline_steps": settings.timeline_steps,
            "gpu_work": settings.gpu_work,
            "lr": settings.lr,
            "seed": settings.seed,
            "notes": settings.notes,
        },
        "cpu_threads": threads,
        "nccl_env": {k: os.environ.get(k) for k in NCCL_ENV} if on_gpus() else {},
        "duration_s": round(seconds, 1),
        "clock": synced_clock(used),
        "timing": "median of per-step wall times; each step ends with a synchronize of every "
        "device used; DDP: the slowest rank per step",
        "gpu_work": "a profiled repeat of each timeline's steps, after all timing"
        if settings.gpu_work
        else None,
    }
