"""How close can one process get to DDP? The ladder and the clone set, rung by rung.

`run` measures every rung (`ladder_rungs`) and DDP interleaved: in each of ``repeats``
rounds every rung is built afresh from the same weights and batch, warmed up and timed
(each step ended by a synchronize of every device), then DDP runs in its own processes.
A row keeps each round's median (``repeats``) and their minimum, median and maximum, and,
per round, each phase's mean bar from a few recorded steps (``phase_ms``); the first
round's timeline is kept, and with ``gpu_work`` a profiled pass after the last round adds the
GPU work inside its bars. The ladder and libtorch_replicate chapters run it live on small
workloads beside the runs recorded on GPUs (``ladder.json``, ``clone.json``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from learn_parallel.devices import resolve_devices, synchronize
from learn_parallel.lab import provenance, trace
from learn_parallel.lab.ddp_timeline import choose_backend
from learn_parallel.lab.kernels import ProfiledPass
from learn_parallel.lab.ladder_rungs import CLONE_SET, DDP_ROWS, LADDER, LR, MEASURED, SEED, Rung
from learn_parallel.lab.measurement import HOST_RETURNED, synced_clock
from learn_parallel.lab.steps import failure_becomes_row, record_timeline
from learn_parallel.lab.timeline import HOST, Timeline, describe_hardware
from learn_parallel.lab.timing import step_times_ms
from learn_parallel.lab.workloads import Workload, build_model, standard_workloads
from learn_parallel.replicate import replicate
from learn_parallel.variants.clone_replicate import clone_replicate

SCHEMA = "learn_parallel.lab.ladder/3"
# Times torch's DDP in its own processes: (workloads, world, warmup, steps, backend, timeout_s,
# graphs, lr, seed) -> {kind: {"ddp": result, "ddp_graphs": result}}; the recording passes one.
DdpTimer = Callable[..., dict[str, dict[str, dict[str, Any]]]]
__all__ = ["CLONE_SET", "DDP_ROWS", "LADDER", "default_workloads", "run"]


def default_workloads(on_gpu: bool, quick: bool) -> list[Workload]:
    """The benchmark's ResNet-18 and MLP (`workloads.SIZES`): GPU sizes, CPU ones, or quick."""
    table = standard_workloads("quick" if quick else "gpu" if on_gpu else "cpu")
    return [table["conv"], table["mlp"]]


def measure_round(
    row: dict[str, Any],
    rung: Rung,
    workload: Workload,
    count: int,
    warmup: int,
    steps: int,
    timeline_steps: int,
    later: ProfiledPass | None = None,
) -> None:
    """One round of ``rung``: build, warm up, time, then record ``timeline_steps`` more; the
    round's times and phase means go into ``row`` (the first round's timeline too, its GPU
    work queued on ``later``)."""
    if row["status"] != "ok":
        return  # not applicable here, or failed in an earlier round
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        devices = resolve_devices(list(range(count)))
        step, marked = rung.make(workload, devices)
        host: list[float] = []
        times = step_times_ms(step, devices, warmup, steps, host)
        if marked is not None and timeline_steps > 0:
            timeline = record_timeline(step, marked, timeline_steps)
            row.setdefault("phase_ms", []).append(phase_ms(timeline))
            if "timeline" not in row:
                row["timeline"] = timeline
                if later is not None:
                    again = partial(_remade, rung, workload, devices)
                    later.gpu_work(timeline, again, marked, timeline_steps, warmup)
    row["step_ms_all"].append(times)
    row["repeats"].append(statistics.median(times))
    row["host_ms_repeats"].append(statistics.median(host))
    for w in caught:
        if not issubclass(w.category, RuntimeWarning):  # not the row's business: pass it on
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in row["note"]:  # a refused capture: ran, but not as named
            row["note"] = f"{row['note']}; {w.message}" if row["note"] else str(w.message)


def phase_ms(timeline: Timeline) -> dict[str, float]:
    """Per phase, its bars' ms per step, averaged over the device rows (the host row left out;
    a row without the phase counts as 0)."""
    rows = {r.device for r in timeline.records if r.device != HOST}
    totals: dict[str, float] = defaultdict(float)
    for r in timeline.records:
        if r.device in rows:
            totals[r.phase] += r.duration_ms
    per = max(1, len(rows) * len(timeline.steps()))
    return {phase: ms / per for phase, ms in sorted(totals.items())}


def _remade(rung: Rung, workload: Workload, devices: list) -> Callable[[], Any]:
    return rung.make(workload, devices)[0]


def replicate_host_ms(workload: Workload, count: int, repeats: int = 20) -> dict[str, float]:
    """Median host time of one replicate call per strategy, until it returns (`HOST_RETURNED`:
    no synchronize inside the timing; every device synchronized between calls). "clone, no
    edges" is the clone strategy without its autograd edges: its copies alone."""
    trace.refuse_after_profiler("Timing replicate")
    devices = resolve_devices(list(range(count)))
    model = build_model(workload).to(devices[0].torch_device)
    result = {}
    no_edges = partial(clone_replicate, detach=True)
    strategies = (("broadcast", replicate), ("clone", clone_replicate))
    for name, strategy in (*strategies, ("clone, no edges", no_edges)):
        times = []
        for _ in range(repeats + 2):
            start = time.perf_counter()
            replicas = strategy(model, devices)
            times.append((time.perf_counter() - start) * 1e3)
            del replicas
            synchronize(devices)
        result[name] = statistics.median(times[2:])
    return result


def _row(name: str, change: str, preconditions: str, below: str | None, kind: str, count: int):
    """A row before it is measured: what the rung is, and room for its rounds."""
    row = {"rung": name, "workload": kind, "devices": count, "change": change}
    row |= {"preconditions": preconditions, "below": below, "status": "ok", "note": ""}
    return row | {"repeats": [], "step_ms_all": [], "host_ms_repeats": []}


def ddp_round(rows: dict, workloads: Sequence[Workload], launch: Callable[..., dict]) -> None:
    """One round of DDP (and, on GPUs, DDP in a CUDA graph): one ``launch`` of the ranks."""
    alive = {name for (_, name), row in rows.items() if name in DDP_ROWS and row["status"] == "ok"}
    if not alive:
        return  # failed in an earlier round (or not applicable): no processes to start
    try:
        results = launch(graphs="ddp_graphs" in alive, lr=LR, seed=SEED)
    except Exception as error:  # noqa: BLE001 - the ranks' failure is the rows' note
        results = {
            w.kind: {n: {"status": "failed", "note": str(error)[-600:]} for n in DDP_ROWS}
            for w in workloads
        }
    for workload in workloads:
        for name in DDP_ROWS:
            row = rows[workload.kind, name]
            result = results.get(workload.kind, {}).get(name)
            if row["status"] != "ok" or result is None:
                continue
            if result["status"] != "ok":
                row.update(status="failed", note=result["note"])
                continue
            row["step_ms_all"].append(result["step_ms_all"])
            row["repeats"].append(statistics.median(result["step_ms_all"]))


def run(
    which: str,
    workloads: Sequence[Workload],
    count: int,
    out: Path,
    *,
    repeats: int = 5,
    warmup: int = 5,
    steps: int = 30,
    timeline_steps: int = 3,
    ddp: DdpTimer | None = None,
    ddp_timeout: float = 300.0,
    command: str = "",
    progress: bool = True,
    gpu_work: bool = False,
) -> dict[str, Any]:
    """Measure ``which`` (``"ladder"`` or ``"clone"``) interleaved; write and return the JSON.
    DDP's rows come from ``ddp`` (None or False: no DDP rows); ``gpu_work``: after every
    round, profile each rung's first timeline again for the GPU work in its bars."""
    out.mkdir(parents=True, exist_ok=True)
    rungs = MEASURED if which == "ladder" else CLONE_SET
    started = time.perf_counter()
    rows = {
        (w.kind, r.name): _row(r.name, r.change, r.preconditions, r.below, w.kind, count)
        for w in workloads
        for r in rungs
    }
    ddp = ddp if which == "ladder" else None
    for w in workloads:
        for r in rungs:
            if r.needs_cuda and not torch.cuda.is_available():
                rows[w.kind, r.name].update(status="not applicable", note="needs CUDA GPUs")
        for name, (change, below) in DDP_ROWS.items() if ddp else ():
            rows[w.kind, name] = _row(name, change, "one process per device", below, w.kind, count)
    if ddp and choose_backend(count)[0] != "nccl":
        for w in workloads:
            rows[w.kind, "ddp_graphs"].update(status="not applicable", note="needs CUDA GPUs")
    ordered = sorted(rungs, key=lambda rung: rung.measure_last)
    later = ProfiledPass() if gpu_work else None
    for number in range(repeats):
        for rung in ordered:
            for workload in workloads:
                row = rows[workload.kind, rung.name]
                if progress:
                    where = f"round {number + 1}/{repeats}: {workload.kind}, {rung.name}"
                    print(where, file=sys.stderr, flush=True)
                # A failing rung becomes its row's note; its step is freed before the next rung.
                with failure_becomes_row(row):
                    measure_round(row, rung, workload, count, warmup, steps, timeline_steps, later)
            if ddp and rung is _last_eager(ordered):
                backend = choose_backend(count)[0]
                launch = partial(ddp, workloads, count, warmup, steps, backend, ddp_timeout)
                ddp_round(rows, workloads, launch)
    for row in rows.values():
        if row["status"] == "ok" and (ms := row["repeats"]):  # the rounds' medians
            row.update(step_ms=statistics.median(ms), step_ms_min=min(ms), step_ms_max=max(ms))
        if host := row.get("host_ms_repeats"):  # our rungs; DDP's ranks each have a host
            row["host_ms"] = statistics.median(host)
    host = {w.kind: replicate_host_ms(w, count) for w in workloads} if which == "clone" else {}
    if later is not None:
        if progress:
            print("after every round: the first timelines again, profiled", file=sys.stderr)
        later.run()  # nothing is timed after this: torch.profiler has run
    for row in rows.values():
        if isinstance(row.get("timeline"), Timeline):
            row["timeline"] = row["timeline"].to_dict()
    devices = resolve_devices(list(range(count)))
    hardware = describe_hardware(devices)
    report = {
        "schema": SCHEMA,
        "set": which,
        **provenance.run_metadata(command),
        "hardware": hardware.__dict__ | {"label": hardware.label()},
        "workloads": {w.kind: {**w.to_dict(), "title": w.describe()} for w in workloads},
        "clock": synced_clock(devices),  # every step time; the timelines are CUDA events
        "timing": f"{repeats} interleaved rounds; in each, every rung is built afresh and timed "
        f"for {steps} steps after {warmup} warm-up steps, each step ended by a synchronize of "
        "every device (DDP: the slowest rank per step); a row's repeats are its rounds' medians; "
        f"then {timeline_steps} steps recorded per device, whose mean bar per phase is the "
        "round's phase_ms; host_ms: median over the rounds of the host time until the step "
        "returned (its work enqueued), for the rungs run in this process",
        "gpu_work": "in the first round's timelines: a profiled repeat of their steps, after "
        "every round was timed (learn_parallel.lab.kernels)"
        if gpu_work
        else None,
        "repeats": repeats,
        "rows": [rows[key] for key in rows],
        "replicate_host_ms": host,
        "replicate_clock": HOST_RETURNED,  # replicate_host_ms's timer: not the steps' clock
        "duration_s": round(time.perf_counter() - started, 1),
    }
    report = provenance.stamp(report, f"{which}.json")
    (out / f"{which}.json").write_text(json.dumps(report, indent=1))
    return report


def _last_eager(ordered: Sequence[Rung]) -> Rung:
    """DDP's processes run after the last rung that is not measured last in a round."""
    eager = [r for r in ordered if not r.measure_last]
    return eager[-1] if eager else ordered[-1]
