"""How close can one process get to DDP? The ladder and the clone set, rung by rung.

Measures a *ladder*: one implementation per rung, each rung one named change
on top of the one before, all in one run, side by side, then DDP (one process
per device, via the benchmark's torchrun launcher). Every rung trains the same
model from the same weights on the same batch: warm-up steps, then timed steps
each ended by a synchronize of every device; the median is reported. A few
more steps of each rung with phase marks are recorded per device (timelines).

``--set clone`` measures the two replicate strategies instead
(``DataParallel``'s broadcast and ``CloneDataParallel``'s clone), plus the
host time of one ``replicate`` call with each.

`run` writes ``ladder.json`` (or ``clone.json``) into its ``out`` folder; the ladder and
libtorch_replicate chapters run it live on small workloads, and ``python -m
experiments.ladder`` records it on GPUs.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import (
    resolve_device_ids,
    synchronize,
)
from learn_parallel.lab import provenance
from learn_parallel.lab.bench import Group, Settings, make_step, record_timeline, run_ddp
from learn_parallel.lab.timing import describe_hardware, step_times_ms
from learn_parallel.lab.workloads import Workload, build_model, standard_workloads
from learn_parallel.replicate import replicate
from learn_parallel.variants.clone_replicate import CloneDataParallel, clone_replicate
from learn_parallel.variants.fast import FastDataParallel

SCHEMA = "learn_parallel.lab.ladder/1"


# [rungs]
class TorchReplicateDataParallel(DataParallel):
    """Our DataParallel (persistent workers) with torch's own replicate: the second rung."""

    def replicate(self, module: nn.Module, device_ids: Sequence[Any]) -> list[nn.Module]:
        return torch.nn.parallel.replicate(module, device_ids, not torch.is_grad_enabled())


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: what it changes, what it needs, and how to build it."""

    name: str
    change: str
    preconditions: str
    needs_cuda: bool
    build: Callable[[nn.Module, list[int]], Callable[[torch.Tensor], torch.Tensor]]
    # Measured after every other rung of every workload: a CUDA-graph capture that
    # fails can leave CUDA's random number generator unusable for the whole process.
    measure_last: bool = False


LADDER = (
    Rung("torch_dp", "torch.nn.DataParallel: a fresh thread per replica every step, "
         "torch's replicate", "none", True,
         lambda m, ids: torch.nn.DataParallel(m, device_ids=ids)),
    Rung("persistent_workers", "one long-lived worker thread per device (our parallel_apply); "
         "torch's replicate still rebuilds every module each step", "none", True,
         lambda m, ids: TorchReplicateDataParallel(m, device_ids=ids)),
    Rung("lean_replicate", "our replicate: module shells filled without Module.__setattr__ "
         "(learn_parallel.DataParallel as the chapters teach it)", "none", False,
         lambda m, ids: DataParallel(m, device_ids=ids)),
    Rung("kept_replicas", "replicas built once and kept; each step refreshes their flat "
         "parameter buffers with one multi-tensor copy and one copy per device; one gradient "
         "reduce per dtype after backward", "parameters and buffers not replaced after "
         "wrapping; gradients through .backward() only", False,
         lambda m, ids: FastDataParallel(m, ids, overlap_reduce=False)),
    Rung("overlap_reduce", "gradients reduced in ~25 MB buckets as soon as every replica has "
         "produced them, while backward still runs",
         "as above, plus forward and backward on the same CUDA streams",
         False, lambda m, ids: FastDataParallel(m, ids, overlap_reduce=True)),
    Rung("cuda_graphs", "each replica's forward and backward captured once as two CUDA "
         "graphs and replayed, the rest of the step eager: two graph launches per replica "
         "instead of hundreds of kernel launches from threads sharing the GIL",
         "as above, plus the same input shapes every step, tensor inputs only, no "
         "data-dependent control flow, CUDA GPUs", True,
         lambda m, ids: FastDataParallel(m, ids, overlap_reduce=True, cuda_graphs=True),
         measure_last=True),
)  # fmt: skip

CLONE_SET = (
    Rung("broadcast", "DataParallel: PyTorch's Python design, one "
         "Broadcast node for all parameters", "none", False,
         lambda m, ids: DataParallel(m, device_ids=ids)),
    Rung("clone", "CloneDataParallel: libtorch's design, a deep copy per device "
         "and one ReduceAdd edge per parameter", "none", False,
         lambda m, ids: CloneDataParallel(m, device_ids=ids)),
)  # fmt: skip
# [rungs]


def default_workloads(on_gpu: bool, quick: bool) -> list[Workload]:
    """The benchmark's ResNet-18 and MLP (`workloads.SIZES`): GPU sizes, CPU ones, or quick."""
    table = standard_workloads("quick" if quick else "gpu" if on_gpu else "cpu")
    return [table["conv"], table["mlp"]]


# [measure-rung]
def measure_rung(
    rung: Rung, workload: Workload, count: int, warmup: int, steps: int, timeline_steps: int
) -> dict[str, Any]:
    """Time ``rung`` on ``count`` devices: the row of the result table, with a timeline."""
    row: dict[str, Any] = {"rung": rung.name, "workload": workload.kind, "devices": count}
    row.update(change=rung.change, preconditions=rung.preconditions, status="ok", note="")
    if rung.needs_cuda and not torch.cuda.is_available():
        row.update(status="not applicable", note="needs CUDA GPUs")
        return row
    try:
        devices = resolve_device_ids(list(range(count)))
        step, forward, _ = make_step(workload, devices, rung.build)
        times = step_times_ms(step, devices, warmup, steps)
        row.update(step_ms=statistics.median(times), step_ms_all=times)
        marked = getattr(forward, "devices", None)  # torch's DataParallel marks no phases
        if marked is not None and timeline_steps > 0:
            row["timeline"] = record_timeline(step, marked, timeline_steps)
    except Exception as error:  # noqa: BLE001 - one failing rung is a row, not a lost run
        row.update(status="failed", note=f"{type(error).__name__}: {error}"[:600])
    finally:
        gc.collect()  # hooks and kept replicas form cycles: free them before the next rung
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return row


def replicate_host_ms(workload: Workload, count: int, repeats: int = 20) -> dict[str, float]:
    """Median host time of one replicate call per strategy (no synchronize inside the timing)."""
    devices = resolve_device_ids(list(range(count)))
    model = build_model(workload).to(devices[0].torch_device)
    result = {}
    for name, strategy in (("broadcast", replicate), ("clone", clone_replicate)):
        times = []
        for _ in range(repeats + 2):
            start = time.perf_counter()
            replicas = strategy(model, devices, False)
            times.append((time.perf_counter() - start) * 1e3)
            del replicas
            synchronize(devices)
        result[name] = statistics.median(times[2:])
    return result


# [measure-rung]


def run(
    which: str,
    workloads: Sequence[Workload],
    count: int,
    out: Path,
    warmup: int,
    steps: int,
    timeline_steps: int,
    ddp: bool,
    ddp_timeout: float,
    command: str,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure every rung of ``which`` (``"ladder"`` or ``"clone"``), write and return the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    rungs = LADDER if which == "ladder" else CLONE_SET
    started = time.perf_counter()
    host: dict[str, dict[str, float]] = {}
    pairs = [(w, r) for w in workloads for r in rungs]
    measured = {}
    for workload, rung in sorted(pairs, key=lambda pair: pair[1].measure_last):
        if progress:
            print(f"{workload.kind}: {rung.name}, {count} devices", file=sys.stderr, flush=True)
        row = measure_rung(rung, workload, count, warmup, steps, timeline_steps)
        measured[workload.kind, rung.name] = row
    rows = [measured[w.kind, r.name] for w, r in pairs]  # the ladder's order
    if which == "clone":
        for workload in workloads:
            host[workload.kind] = replicate_host_ms(workload, count)
    if ddp:
        groups = [Group(w, False if torch.cuda.is_available() and w.kind == "conv" else None)
                  for w in workloads]  # fmt: skip
        settings = Settings(
            workloads=list(workloads), devices=[count], implementations=["ddp"],
            cudnn_modes=[False], warmup=warmup, steps=steps, timeline_steps=0, lr=0.01,
            seed=0, out=out, ddp_timeout=ddp_timeout, progress=False, plots=False,
        )  # fmt: skip
        for group, result in zip(groups, run_ddp(count, groups, settings)):
            row = {"rung": "ddp", "workload": group.workload.kind, "devices": count}
            row.update(change="torch's DistributedDataParallel: one process per device",
                       preconditions="one process per device", status=result["status"],
                       note=result["note"])  # fmt: skip
            if result["status"] == "ok":
                row.update(step_ms=result["step_ms"], step_ms_all=result["step_ms_all"])
            rows.append(row)
    hardware = describe_hardware(resolve_device_ids(list(range(count))))
    report = {
        "schema": SCHEMA,
        "set": which,
        **provenance.run_metadata(command),
        "hardware": hardware.__dict__ | {"label": hardware.label()},
        "workloads": {w.kind: {**w.to_dict(), "title": w.describe()} for w in workloads},
        "timing": f"median of {steps} steps after {warmup} warm-up steps, each ended by a "
        "synchronize of every device; DDP: the slowest rank per step",
        "rows": rows,
        "replicate_host_ms": host,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    (out / f"{which}.json").write_text(json.dumps(report, indent=1))
    return report


def table(report: dict[str, Any]) -> str:
    """The printed summary: step time per rung and its ratio to DDP's."""
    lines = [f"{report['set']} on {report['hardware']['label']}"]
    for kind in report["workloads"]:
        rows = [r for r in report["rows"] if r["workload"] == kind]
        ddp = next((r.get("step_ms") for r in rows if r["rung"] == "ddp"), None)
        lines.append(f"\n{report['workloads'][kind]['title']}")
        for r in rows:
            if r["status"] != "ok":
                lines.append(f"  {r['rung']:<20} {r['status']}: {r['note'][:150]}")
                continue
            ratio = f"{r['step_ms'] / ddp:6.2f} x DDP" if ddp else ""
            lines.append(f"  {r['rung']:<20} {r['step_ms']:9.2f} ms  {ratio}")
        if kind in report["replicate_host_ms"]:
            for name, ms in report["replicate_host_ms"][kind].items():
                lines.append(f"  replicate host time, {name:<10} {ms:8.3f} ms")
    return "\n".join(lines)
