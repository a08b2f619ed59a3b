"""Our DDP beside torch's DDP and our DataParallel: step times and per-rank timelines.

`compare` (the DDP chapter) times `learn_parallel.DistributedDataParallel` and torch's
DDP in the same processes (`run_ranks`: NCCL on GPUs, gloo processes on the CPU), our
`DataParallel` on as many devices in this process, and records a few steps of each of
ours per rank and device (with ``gpu_work``, the DataParallel timelines get their GPU work
from a profiled pass after all timing). A step keeps the maximum over ranks.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import device_count, resolve_devices
from learn_parallel.lab import provenance, spread
from learn_parallel.lab.kernels import ProfiledPass
from learn_parallel.lab.measurement import HOST, HOST_SYNCED
from learn_parallel.lab.processes import rank_device, rank_step_times, run_ranks, share
from learn_parallel.lab.steps import make_step, record_timeline, train_step
from learn_parallel.lab.timeline import Hardware, Timeline
from learn_parallel.lab.timing import Recorder, phase, step_times_ms
from learn_parallel.lab.workloads import Workload, build_model, make_batch, parameter_count
from learn_parallel.ladder.distributed import DEFAULT_BUCKET_CAP_MB, DistributedDataParallel
from learn_parallel.sim import simulation_forced

SCHEMA = "learn_parallel.lab.ddp_timeline/1"
IMPLEMENTATIONS = {
    "ours": "learn_parallel.DistributedDataParallel",
    "torch": "torch.nn.parallel.DistributedDataParallel",
    "dp": "learn_parallel.DataParallel",
}


def _wrap(impl: str, model: torch.nn.Module, device: torch.device, cap_mb: float) -> Any:
    if impl == "ours":
        return DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cap_mb)


def bench_worker(rank: int, world: int, config: dict[str, Any]) -> dict[str, Any]:
    """One rank: time our DDP and torch's on every workload, then record our DDP's timeline
    (one row per rank)."""
    device = rank_device(dist.get_backend(), rank)
    torch.backends.cudnn.benchmark = False
    out: dict[str, Any] = {"workloads": {}}
    for key, fields in config["workloads"].items():
        workload = Workload(**fields)
        rows = share(workload.batch, world, rank)
        x, y = make_batch(workload, rows, device, config["seed"] + rank)
        entry: dict[str, Any] = {}
        for impl in ("ours", "torch"):
            model = build_model(workload, config["seed"]).to(device)
            wrapped = _wrap(impl, model, device, config["bucket_cap_mb"])
            opt = torch.optim.SGD(wrapped.parameters(), lr=config["lr"])
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            step = partial(train_step, wrapped, x, y, workload, opt)
            times = rank_step_times(step, device, config["warmup"], config["steps"])
            entry[impl] = {"step_ms_all": times, "step_ms": statistics.median(times)}
            if device.type == "cuda":
                entry[impl]["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
            if impl == "ours" and config["timeline_steps"] > 0:
                entry["timeline"] = _rank_timeline(step, device, rank, config["timeline_steps"])
                entry["buckets"] = len(wrapped.buckets)
            del wrapped, opt, model, step
            gc.collect()  # our DDP's hooks hold the model in a cycle: free it before the next
            if device.type == "cuda":
                torch.cuda.empty_cache()
        out["workloads"][key] = entry
    out["device_name"] = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU process"
    )
    return out


def _rank_timeline(step: Any, device: torch.device, rank: int, steps: int) -> list[dict]:
    """A few recorded steps on this rank's row, on the host clock every process shares
    (CUDA events on GPUs: the all-reduces marked on our DDP's side stream)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    recorder = Recorder([device], host_row=False, row=f"rank:{rank}", origin_s=0.0)
    with recorder:
        for _ in recorder.steps(steps, synchronize=False):
            with phase("step"):
                step()
    return [asdict(r) for r in recorder.timeline().records]


def choose_backend(world: int) -> tuple[str, str]:
    """NCCL where every rank has a GPU of its own, else gloo; and one line saying which."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= world and not simulation_forced():
        return "nccl", f"{world} ranks on {world} GPUs, talking through NCCL."
    where = f"{gpus} GPU" + ("" if gpus == 1 else "s")
    return "gloo", f"{world} ranks as CPU processes, talking through gloo ({where} here)."


def compare(
    workloads: dict[str, Workload],
    world: int = 2,
    warmup: int = 5,
    steps: int = 20,
    timeline_steps: int = 3,
    bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
    with_dp: bool = True,
    seed: int = 0,
    timeout_s: float = 200.0,
    gpu_work: bool = False,
) -> dict[str, Any]:
    """Our DDP, torch's DDP (``world`` processes) and our DataParallel, on every workload."""
    backend, why = choose_backend(world)
    print(why)
    config = {
        "workloads": {k: w.to_dict() for k, w in workloads.items()},
        "warmup": warmup,
        "steps": steps,
        "timeline_steps": timeline_steps,
        "bucket_cap_mb": bucket_cap_mb,
        "lr": 0.01,
        "seed": seed,
    }
    started = time.perf_counter()
    later = ProfiledPass() if gpu_work else None
    threads = None if backend == "nccl" else 1  # on the CPU one per rank, as per simulated device
    ranks, start_times = run_ranks(
        bench_worker, world, (config,), backend, timeout_s, threads=threads, with_times=True
    )
    processes_s = time.perf_counter() - started
    kind = "cuda" if backend == "nccl" else "cpu"
    names = [r["device_name"] for r in ranks]
    hardware = Hardware(kind, world, names, torch.__version__, torch.version.cuda)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        **provenance.run_metadata(""),  # the driver fills in its command line
        "backend": backend,
        "world": world,
        "hardware": asdict(hardware),
        "label": hardware.label(clock=TRANSPORT[kind]),
        "clock": HOST_SYNCED if kind == "cuda" else HOST,  # every step time, ranks and DP
        "settings": {k: v for k, v in config.items() if k != "workloads"},
        "process_start": {"ranks_s": start_times, "run_ranks_s": processes_s},
        "workloads": {},
    }
    for key, workload in workloads.items():
        first = ranks[0]["workloads"][key]
        entry: dict[str, Any] = {
            "title": workload.describe(),
            "parameters": parameter_count(build_model(workload, seed)),
            "buckets": first.get("buckets"),
            "results": {},
        }
        for impl in ("ours", "torch"):
            entry["results"][impl] = dict(first[impl])
            if "peak_memory_mb" in first[impl]:
                entry["results"][impl]["peak_memory_mb_per_rank"] = [
                    r["workloads"][key][impl]["peak_memory_mb"] for r in ranks
                ]
        if timeline_steps > 0:
            marks = [rec for r in ranks for rec in r["workloads"][key]["timeline"]]
            rows = sorted({rec["device"] for rec in marks})
            clocks = dict.fromkeys(rows, "cuda-event" if kind == "cuda" else "host")
            entry["ddp_timeline"] = dict(hardware=asdict(hardware), records=marks, clocks=clocks)
        if with_dp and device_count() < world:
            print(f"DataParallel left out: {world} ranks, but {device_count()} devices here.")
        elif with_dp:  # learn_parallel.DataParallel on ``world`` devices in this process
            torch.backends.cudnn.benchmark = False
            devices = resolve_devices(list(range(world)))
            step, _, _ = make_step(workload, devices, DataParallel, config["lr"], seed)
            times = step_times_ms(step, devices, warmup, steps)
            entry["results"]["dp"] = {"step_ms_all": times, "step_ms": statistics.median(times)}
            if timeline_steps > 0:
                entry["dp_timeline"] = record_timeline(step, devices, timeline_steps)
                if later is not None:
                    again = partial(make_step, workload, devices, DataParallel, config["lr"], seed)
                    remade = lambda a=again: a()[0]  # noqa: E731 - the step, built again
                    later.gpu_work(entry["dp_timeline"], remade, devices, timeline_steps, warmup)
        ours, theirs = entry["results"]["ours"]["step_ms"], entry["results"]["torch"]["step_ms"]
        entry["ours_over_torch"] = ours / theirs
        report["workloads"][key] = entry
    if later is not None:
        later.run()  # after every timing: nothing below is timed
    for entry in report["workloads"].values():
        if isinstance(entry.get("dp_timeline"), Timeline):
            entry["dp_timeline"] = entry["dp_timeline"].to_dict()
    return report


# How the ranks of a run talked, by the kind of device they ran on: said with the hardware.
TRANSPORT = {"cuda": "NCCL, one process per GPU", "cpu": "gloo"}


def ddp_timeline(report: dict[str, Any], key: str) -> Timeline:
    return Timeline.from_dict(report["workloads"][key]["ddp_timeline"])


def dp_timeline(report: dict[str, Any], key: str) -> Timeline:
    return Timeline.from_dict(report["workloads"][key]["dp_timeline"])


def plot_ranks(timeline: Timeline, step: int | None = None, title: str = "", ax: Any = None) -> Any:
    """One step of DDP: per rank a compute lane and an all-reduce lane, bars per phase."""
    import matplotlib.pyplot as plt

    from learn_parallel.lab.plots import LEGEND_RIGHT, PHASE_COLORS, axes_or_new, figure_height

    colors = {**PHASE_COLORS, "all-reduce": "#E17C05", "unflatten": "#7F7F7F"}
    step = timeline.steps()[-1] if step is None else step
    shown = [r for r in timeline.records if r.step == step and r.phase != "step"]
    if not shown:
        raise ValueError(f"No records for step {step}; recorded steps: {timeline.steps()}.")
    origin = min(r.start_ms for r in shown)
    ranks = sorted({r.device for r in shown}, key=lambda row: int(row.split(":")[1]))
    lanes = [(rank, lane) for rank in ranks for lane in ("compute", "all-reduce")]
    kinds = list(
        dict.fromkeys("all-reduce" if r.phase.startswith("all-reduce") else r.phase for r in shown)
    )
    ax = axes_or_new(ax, figure_height(len(lanes), len(kinds)))
    for y, (rank, lane) in enumerate(lanes):
        for r in shown:
            comm = r.phase.startswith("all-reduce")
            if r.device != rank or comm != (lane == "all-reduce"):
                continue
            kind = "all-reduce" if comm else r.phase
            # Backward spans the unflatten at its end: draw it underneath.
            bar = {"edgecolor": "white" if comm else None, "linewidth": 0.8}
            bar["zorder"] = 1 if kind == "backward" else 2
            ax.barh(y, r.duration_ms, 0.6, r.start_ms - origin, color=colors.get(kind), **bar)
    ax.set_yticks(range(len(lanes)), [f"{rank} {lane}" for rank, lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time since the step began (ms)")
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors.get(k)) for k in kinds]
    ax.legend(handles, kinds, **LEGEND_RIGHT)
    hw = timeline.hardware
    clock = "host clock, shared by the processes"
    if hw.device_type == "cuda":
        clock = "CUDA events (all-reduce: on our DDP's side stream, _comm_stream)"
    what = title or "learn_parallel.DistributedDataParallel, one step per rank"
    ax.set_title(f"{what}\n{hw.label(clock=TRANSPORT[hw.device_type])}; {clock}", fontsize=10)
    return ax.figure


def plot_side_by_side(report: dict[str, Any], key: str, where: str = "") -> Any:
    """DataParallel's timeline of a step above DDP's, on one time axis."""
    import matplotlib.pyplot as plt

    from learn_parallel.lab.plots import plot_timeline

    dp, ddp = dp_timeline(report, key), ddp_timeline(report, key)
    heights = [1 + len(dp.devices()), 2 * ddp.hardware.device_count]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 7.5), layout="constrained", sharex=True, height_ratios=heights
    )
    title = report["workloads"][key]["title"]
    plot_timeline(dp, title=f"learn_parallel.DataParallel: {title}", ax=top)
    top.set_xlabel("")
    plot_ranks(ddp, title=f"learn_parallel.DistributedDataParallel: {title}", ax=bottom)
    if where:
        fig.suptitle(where, fontsize=10)
    return fig


def step_table(report: dict[str, Any]) -> str:
    """Median step time per implementation and workload, with the middle half of the steps,
    and our DDP over torch's: a tie when their middle halves overlap."""
    clock = report.get("clock") or HOST_SYNCED  # older files: rank_step_times, this clock
    lines = [
        f"{report['label']}, {clock}, median of {report['settings']['steps']} steps "
        "(in brackets: the middle half of the steps, first to third quartile)"
    ]
    for entry in report["workloads"].values():
        lines.append(f"\n{entry['title']} ({entry['parameters'] / 1e6:.1f} M parameters)")
        spreads = {}
        for impl, name in IMPLEMENTATIONS.items():
            result = entry["results"].get(impl)
            if result is not None:
                spreads[impl] = spread.Spread.of(result.get("step_ms_all") or [result["step_ms"]])
                lo, hi = spreads[impl].band("middle")
                lines.append(f"  {name:<44}{result['step_ms']:>9.2f} ms ({lo:.2f}-{hi:.2f})")
        verdict = ""
        if "ours" in spreads and "torch" in spreads:
            said = spread.compare(spreads["ours"], spreads["torch"], "middle")
            verdict = {"tie": ", a tie", "faster": ", ours faster", "slower": ", ours slower"}[said]
        lines.append(f"  our DDP / torch's DDP: {entry['ours_over_torch']:.2f}{verdict}")
    return "\n".join(lines)
