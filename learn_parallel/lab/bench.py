"""``python -m learn_parallel bench``: one device, both DataParallels and DDP, side by side.

Every measurement is a full training step (forward, loss, backward, SGD step)
on synthetic data: a few warm-up steps, then timed steps, each ended by a
device synchronize; the median is reported. learn_parallel's steps are also
recorded per device (`learn_parallel.lab.timing`) after the timed steps, so the
recording never slows the timed ones. Everything lands under ``--out``:
``bench.json`` (numbers, timelines, hardware, command, git commit), PNG plots
and the DDP processes' logs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import (
    SIMULATED_DEVICES_ENV,
    Device,
    device_count,
    device_type,
    resolve_device_ids,
)
from learn_parallel.lab import records
from learn_parallel.lab.processes import NCCL_ENV, share
from learn_parallel.lab.timing import Recorder, describe_hardware, phase, step_times_ms
from learn_parallel.lab.trace import chrome_trace
from learn_parallel.lab.workloads import (
    CONV_MODELS,
    SIZES,
    Workload,
    build_model,
    loss_function,
    make_batch,
    parameter_count,
)

IMPLEMENTATIONS = ("single", "learn_parallel", "torch_dp", "ddp")
TORCH_DP_ON_CPU = (
    "not applicable on simulated devices: without GPUs torch.nn.DataParallel "
    "just calls the module once on the CPU"
)
SCHEMA = "learn_parallel.lab.bench/1"


def on_gpus() -> bool:
    """Whether DataParallel runs on GPUs here (not with ``LEARN_PARALLEL_SIMULATE=1``)."""
    return device_type() == "cuda"


@dataclass
class Settings:
    """A resolved benchmark run: what to measure, how long, and where to write."""

    workloads: list[Workload]
    devices: list[int]
    implementations: list[str]
    cudnn_modes: list[bool]
    warmup: int
    steps: int
    timeline_steps: int
    lr: float
    seed: int
    out: Path
    ddp_timeout: float
    progress: bool = True
    plots: bool = True
    notes: list[str] = field(default_factory=list)
    trace: Path | None = None  # Chrome/Perfetto traces: PATH's stem + "-<group>-<impl>-<n>.json"


def plain(doc: str | None) -> str:
    """A docstring for ``--help``: reStructuredText's backticks dropped (argparse prints
    text as it is)."""
    text = re.sub(r"``(.+?)``", r"\1", doc or "")
    return re.sub(r"`([^`\n]+)`", r"\1", text)


def device_count_error(asked: int) -> str | None:
    """Why ``--devices`` asking for ``asked`` devices cannot run here, with the fix; None if it
    can. ``demo`` and ``bench`` both refuse, rather than one of them simulating more."""
    have = device_count()
    if asked <= have:
        return None
    if device_type() == "sim":
        return (
            f"argument --devices: {asked} devices asked for, but there are only {have} "
            f"simulated devices; set {SIMULATED_DEVICES_ENV}={asked} to simulate more"
        )
    return f"argument --devices: {asked} devices asked for, but this machine has {have} GPUs"


def argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with parsed ``bench`` options on this machine, in one line; or None."""
    try:
        device_count()  # reads LEARN_PARALLEL_SIMULATED_DEVICES: a bad value fails here
    except ValueError as error:
        return str(error)
    return device_count_error(max(args.devices)) if args.devices else None


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"device counts must be 1 or more, got {text!r}")
    return values


def _choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in values if v not in allowed]
        if unknown or not values:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown) or 'empty list'}; choose from {','.join(allowed)}"
            )
        return [a for a in allowed if a in values]

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` options. Unset sizes get GPU defaults, or small ones on the CPU."""
    _add_what_to_measure(parser)
    _add_run_length(parser)
    _add_workload_sizes(parser)
    _add_output(parser)


def _add_what_to_measure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--devices",
        type=_int_list,
        default=None,
        help="device counts to measure, e.g. 1,2,4 (default: 1, 2, 4 ... up to every "
        "GPU, or up to the simulated devices without GPUs; --quick: 1,2)",
    )
    parser.add_argument(
        "--workloads",
        type=_choices(("mlp", "conv")),
        default=["mlp", "conv"],
        help="comma-separated: mlp (Linear layers) and/or conv (ResNet-18 or a small CNN); "
        "default mlp,conv",
    )
    parser.add_argument(
        "--implementations",
        type=_choices(IMPLEMENTATIONS),
        default=list(IMPLEMENTATIONS),
        help="comma-separated subset of single (one device, no wrapper), learn_parallel, "
        "torch_dp (torch.nn.DataParallel, GPUs only), ddp (DistributedDataParallel, one "
        "process per device via torchrun); default: all four",
    )
    parser.add_argument(
        "--cudnn-benchmark",
        choices=("off", "on", "both"),
        default=None,
        help="torch.backends.cudnn.benchmark for the conv net; 'both' measures it twice, "
        "since torch.nn.DataParallel's fresh threads re-tune every step with it on "
        f"(default {'both' if on_gpus() else 'off'} here: it only matters on GPUs)",
    )


def _add_run_length(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny models and few steps, for tests and a first look (about half a minute "
        "on a 2-core CPU)",
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first (default 5; CPU 2; quick 2)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed steps; the median is reported (default 20; CPU 5; quick 5)",
    )
    parser.add_argument(
        "--timeline-steps",
        type=int,
        default=None,
        help="extra steps recorded per device for the timeline plots, after the timed "
        "ones (default 3; quick 2; 0 turns recording off)",
    )
    parser.add_argument(
        "--ddp-timeout",
        type=float,
        default=300.0,
        help="seconds one torchrun launch (all workloads for one device count) may take "
        "before it is stopped and marked failed (default 300)",
    )


def _add_workload_sizes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mlp-batch",
        type=int,
        default=None,
        help="MLP global batch (default 4096; CPU 512; quick 64)",
    )
    parser.add_argument(
        "--mlp-width",
        type=int,
        default=None,
        help="MLP features per layer (default 2048; CPU 512; quick 128)",
    )
    parser.add_argument("--mlp-layers", type=int, default=4, help="MLP Linear layers (default 4)")
    parser.add_argument(
        "--conv-batch",
        type=int,
        default=None,
        help="conv net global batch (default 512; CPU 32; quick 16)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="conv net input height and width (default 128; CPU 32; quick 16)",
    )
    parser.add_argument(
        "--conv-model",
        choices=CONV_MODELS,
        default=None,
        help="resnet18 (needs torchvision), small_cnn (the package's own), or auto: "
        "resnet18 when torchvision imports (default auto; quick small_cnn)",
    )
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data")


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("out/bench"),
        help="directory for bench.json, the PNG plots and DDP logs (default out/bench)",
    )
    parser.add_argument("--no-plots", action="store_true", help="write bench.json only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="PATH",
        help="also profile two steps of learn_parallel and torch.nn.DataParallel on the most "
        "devices and write Chrome/Perfetto traces next to PATH, named "
        "<stem>-<group>-<implementation>-<devices>.json (open at https://ui.perfetto.dev)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Fill in every unset option from the machine (GPU or CPU) and ``--quick``."""
    pick = _picker(args.quick, on_gpus())
    notes: list[str] = []
    devices = _device_counts(args, notes)
    mode = pick(args.cudnn_benchmark, "both", "off", "both" if on_gpus() else "off")
    implementations = list(args.implementations)
    if "single" in implementations and 1 not in devices:
        notes.append("single is always measured on one device")
    return Settings(
        workloads=_workloads(args),
        devices=devices,
        implementations=implementations,
        cudnn_modes={"off": [False], "on": [True], "both": [False, True]}[mode],
        warmup=pick(args.warmup, 5, 2, 2),
        steps=max(1, pick(args.steps, 20, 5, 5)),
        timeline_steps=pick(args.timeline_steps, 3, 3, 2),
        lr=args.lr,
        seed=args.seed,
        out=args.out,
        ddp_timeout=args.ddp_timeout,
        progress=not args.no_progress,
        plots=not args.no_plots,
        notes=notes,
        trace=args.trace,
    )


def _picker(quick: bool, on_gpu: bool) -> Callable[[Any, Any, Any, Any], Any]:
    """``pick(value, gpu, cpu, quick)``: the value given, else the default for this run."""

    def pick(value: Any, gpu: Any, cpu: Any, quick_value: Any) -> Any:
        if value is not None:
            return value
        return quick_value if quick else (gpu if on_gpu else cpu)

    return pick


def _device_counts(args: argparse.Namespace, notes: list[str]) -> list[int]:
    available = device_count()
    default_counts = [n for n in (1, 2, 4, 8, 16) if n <= available] + [available]
    devices = args.devices or ([1, 2] if args.quick else sorted(set(default_counts)))
    problem = device_count_error(max(devices))
    if problem:  # the command lines say so before they get here (argument_error)
        raise ValueError(problem)
    return devices


def _workloads(args: argparse.Namespace) -> list[Workload]:
    """The workloads asked for, at the size of this run (`workloads.SIZES`) unless given."""
    size = "quick" if args.quick else "gpu" if on_gpus() else "cpu"
    given = {
        "mlp": {"batch": args.mlp_batch, "width": args.mlp_width, "layers": args.mlp_layers},
        "conv": {"batch": args.conv_batch, "image_size": args.image_size, "model": args.conv_model},
    }
    chosen = [
        replace(SIZES[size][kind], **{k: v for k, v in given[kind].items() if v is not None})
        for kind in ("mlp", "conv")
        if kind in args.workloads
    ]
    return [w.resolved() if w.kind == "conv" else w for w in chosen]


@dataclass(frozen=True)
class Group:
    """One workload under one cudnn.benchmark setting: one table, one set of plots."""

    workload: Workload
    cudnn_benchmark: bool | None  # None: the setting does not matter (MLP, or no GPU)

    @property
    def key(self) -> str:
        if self.cudnn_benchmark is None:
            return self.workload.kind
        return f"{self.workload.kind}-cudnn-benchmark-{'on' if self.cudnn_benchmark else 'off'}"

    def title(self) -> str:
        extra = ""
        if self.cudnn_benchmark is not None:
            extra = f", cudnn.benchmark {'on' if self.cudnn_benchmark else 'off'}"
        return self.workload.describe() + extra


def groups_of(settings: Settings) -> list[Group]:
    groups = []
    for w in settings.workloads:
        if w.kind == "conv" and on_gpus():
            groups += [Group(w, mode) for mode in settings.cudnn_modes]
        else:
            groups.append(Group(w, None))
    return groups


def train_step(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    workload: Workload,
    optimizer: Any,
) -> None:
    """One full training step; the phase marks cost nothing unless a recorder is on."""
    output = model(x)
    with phase("loss"):
        loss = loss_function(workload, output, y)
    with phase("backward"):
        loss.backward()
    with phase("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def make_step(
    workload: Workload,
    devices: Sequence[Device],
    wrap: Callable[[nn.Module, list[int]], Any],
    lr: float = 0.01,
    seed: int = 0,
) -> tuple[Callable[[], None], Any, nn.Module]:
    """One training step of ``workload``: its model on the first device, wrapped by
    ``wrap(model, device_ids)``, and a batch there; returns (step, wrapper, model)."""
    source = devices[0].torch_device
    model = build_model(workload, seed).to(source)
    forward = wrap(model, [d.index for d in devices])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = make_batch(workload, workload.batch, source, seed)

    def step() -> None:
        train_step(forward, x, y, workload, optimizer)

    return step, forward, model


def record_timeline(step: Callable[[], Any], devices: Sequence[Device], steps: int) -> dict:
    """``steps`` more calls of ``step`` recorded per device (`Recorder`), as JSON-ready data."""
    with Recorder(devices=devices) as recorder:
        for _ in recorder.steps(steps):
            step()
    return recorder.timeline().to_dict()


def measure_in_process(
    implementation: str,
    group: Group,
    count: int,
    settings: Settings,
    parameters: dict[str, int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Time one implementation on ``count`` devices in this process; maybe record a timeline.

    ``parameters``, if given, receives the trained model's parameter count under the group's key.
    """
    row = _row(group, implementation, count)
    if implementation == "torch_dp" and not on_gpus():
        row.update(status="not applicable", note=TORCH_DP_ON_CPU)
        return row, None
    torch.backends.cudnn.benchmark = bool(group.cudnn_benchmark)
    timeline = None
    trace = None
    if settings.trace and implementation != "single" and count == max(settings.devices):
        trace = settings.trace.with_name(
            f"{settings.trace.stem}-{group.key}-{implementation}-{count}.json"
        )
    try:
        times, timeline, size = _train_and_time(
            implementation, group.workload, count, settings, trace
        )
        if parameters is not None:
            parameters[group.key] = size
        row.update(_summary(times, group.workload.batch))
        if trace is not None:
            row["trace"] = trace.name
    except Exception as error:  # noqa: BLE001 - one failure (say, out of memory) is a row
        row.update(status="failed", note=f"{type(error).__name__}: {error}"[:500])
    finally:
        gc.collect()  # the model and its replicas are gone: give their memory back
        if on_gpus():
            torch.cuda.empty_cache()
    return row, timeline


def _train_and_time(
    implementation: str,
    workload: Workload,
    count: int,
    settings: Settings,
    trace: Path | None = None,
) -> tuple[list[float], dict[str, Any] | None, int]:
    devices = resolve_device_ids(list(range(count)))
    recorded_on: Sequence[Device] | None = devices[:1]

    def one_device(model: nn.Module, ids: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
        # The one-device baseline marks its own forward, so its timeline has one too.
        def forward(x: torch.Tensor) -> torch.Tensor:
            with phase("forward", devices[0]):
                return model(x)

        return forward

    wrap: Callable[[nn.Module, list[int]], Any] = one_device
    if implementation == "learn_parallel":
        wrap, recorded_on = DataParallel, devices
    elif implementation == "torch_dp":
        wrap, recorded_on = torch.nn.DataParallel, None  # torch's marks no phases
    step, _, model = make_step(workload, devices, wrap, settings.lr, settings.seed)
    times = step_times_ms(step, devices, settings.warmup, settings.steps)
    timeline = None
    if recorded_on is not None and settings.timeline_steps > 0:
        timeline = record_timeline(step, recorded_on, settings.timeline_steps)
    if trace is not None:
        with chrome_trace(trace):
            for _ in range(2):
                step()
    return times, timeline, parameter_count(model)


def _row(group: Group, implementation: str, count: int) -> dict[str, Any]:
    return {
        "group": group.key,
        "workload": group.workload.kind,
        "model": group.workload.model,
        "cudnn_benchmark": group.cudnn_benchmark,
        "implementation": implementation,
        "devices": 1 if implementation == "single" else count,
        "global_batch": group.workload.batch,
        "status": "ok",
        "note": "",
    }


def _summary(times: list[float], batch: int) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "step_ms": median,
        "step_ms_min": min(times),
        "step_ms_mean": statistics.fmean(times),
        "step_ms_all": times,
        "samples_per_s": batch / (median / 1e3),
    }


def ddp_environment(count: int) -> dict[str, str]:
    """The environment of ``count`` DDP processes: NCCL settings, our package, CPU threads."""
    env = dict(os.environ)
    for name, value in NCCL_ENV.items():
        env.setdefault(name, value)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if not on_gpus():
        # Share the cores the way the simulated devices share them in one process.
        env.setdefault("OMP_NUM_THREADS", str(max(1, torch.get_num_threads() // count)))
    return env


def run_ddp(count: int, groups: Sequence[Group], settings: Settings) -> list[dict[str, Any]]:
    """Launch ``count`` DDP processes with torchrun; they time every group in one go."""
    folder = settings.out / "ddp"
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / f"config-{count}.json"
    result_path = folder / f"result-{count}.json"
    log_path = folder / f"torchrun-{count}.log"
    result_path.unlink(missing_ok=True)
    # A rank without data would leave the others waiting in all-reduce: a group whose batch
    # leaves the last rank empty is marked failed on its own, the others still run.
    rows = {g.key: _row(g, "ddp", count) for g in groups}
    for g in groups:
        if share(g.workload.batch, count, count - 1) == 0:
            rows[g.key].update(
                status="failed",
                note=f"global batch {g.workload.batch} too small for {count} processes "
                f"(split like chunk, the last rank gets no rows)",
            )
    groups = [g for g in groups if rows[g.key]["status"] != "failed"]
    if not groups:
        return list(rows.values())
    jobs = [
        {"key": g.key, "workload": g.workload.to_dict(), "cudnn_benchmark": bool(g.cudnn_benchmark)}
        for g in groups
    ]
    config = {
        "jobs": jobs,
        "warmup": settings.warmup,
        "steps": settings.steps,
        "lr": settings.lr,
        "seed": settings.seed,
    }
    config_path.write_text(json.dumps(config, indent=1))
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={count}", "-m", "learn_parallel.lab.bench_ddp",
        "--config", str(config_path), "--result", str(result_path),
    ]  # fmt: skip
    backend = "NCCL" if on_gpus() else "gloo, one CPU process per device"
    for g in groups:
        rows[g.key]["note"] = f"{count} process(es) via torchrun, {backend}"
    failure = ""
    try:
        with log_path.open("w") as log:
            done = subprocess.run(
                command, env=ddp_environment(count), stdout=log, stderr=subprocess.STDOUT,
                timeout=settings.ddp_timeout, check=False,
            )  # fmt: skip
        if done.returncode != 0 or not result_path.exists():
            tail = log_path.read_text()[-800:]
            failure = f"torchrun exited with {done.returncode}; log {log_path}: ...{tail}"
    except subprocess.TimeoutExpired:
        failure = f"stopped after {settings.ddp_timeout:.0f} s (--ddp-timeout); log {log_path}"
    if failure:
        for g in groups:
            rows[g.key].update(status="failed", note=failure)
        return list(rows.values())
    by_key = {entry["key"]: entry for entry in json.loads(result_path.read_text())}
    for group in groups:
        entry = by_key.get(group.key, {"status": "failed", "note": "no result"})
        if entry["status"] == "ok":
            rows[group.key].update(_summary(entry["step_ms_all"], group.workload.batch))
        else:
            rows[group.key].update(status="failed", note=entry["note"])
    return list(rows.values())


class _Progress:
    """tqdm when it is installed, a printed line per task otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled, self.total, self.done = enabled, total, 0
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="run", file=sys.stderr)
            except ImportError:
                pass

    def start(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)
        elif self.enabled:
            print(f"[{self.done + 1}/{self.total}] {text} ...", file=sys.stderr, flush=True)

    def finish(self, count: int = 1) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(settings: Settings, command_line: str = "") -> dict[str, Any]:
    """Measure everything ``settings`` asks for; return (and write) the report."""
    for name, value in NCCL_ENV.items():
        os.environ.setdefault(name, value)  # our own DataParallels broadcast with NCCL too
    settings.out.mkdir(parents=True, exist_ok=True)
    groups = groups_of(settings)
    in_process = [i for i in settings.implementations if i != "ddp"]
    tasks = [
        (impl, group, n)
        for group in groups
        for n in settings.devices
        for impl in in_process
        if impl != "single" or n == settings.devices[0]
    ]
    ddp_counts = settings.devices if "ddp" in settings.implementations else []
    progress = _Progress(len(tasks) + len(ddp_counts), settings.progress)
    results, timelines = [], []
    parameters: dict[str, int] = {}  # group key -> parameter count of the model it trained
    started = time.perf_counter()
    for impl, group, n in tasks:
        progress.start(f"{group.key} {impl} {1 if impl == 'single' else n} dev")
        row, timeline = measure_in_process(impl, group, n, settings, parameters)
        results.append(row)
        if timeline is not None:
            timelines.append(
                {"group": group.key, "implementation": impl, "devices": row["devices"],
                 "timeline": timeline}
            )  # fmt: skip
        progress.finish()
    for n in ddp_counts:
        progress.start(f"ddp {n} processes (torchrun)")
        results += run_ddp(n, groups, settings)
        progress.finish()
    progress.close()

    report = {
        "schema": SCHEMA,
        "meta": _metadata(settings, command_line, time.perf_counter() - started),
        "groups": [
            {
                "key": g.key,
                "title": g.title(),
                "workload": g.workload.to_dict(),
                "cudnn_benchmark": g.cudnn_benchmark,
                "parameters": parameters.get(g.key) or _count_on_meta(g.workload, settings.seed),
            }
            for g in groups
        ],  # fmt: skip
        "results": results,
        "timelines": timelines,
        "plots": [],
    }
    if settings.plots:
        report["plots"] = write_plots(report, settings.out)
    (settings.out / "bench.json").write_text(json.dumps(report, indent=1))
    return report


def _count_on_meta(workload: Workload, seed: int) -> int:
    """The parameter count of a workload no in-process run trained (say, DDP only).

    Built on the meta device: shapes without memory, and nothing to copy anywhere.
    """
    with torch.device("meta"):
        return parameter_count(build_model(workload, seed))


def _git_commit() -> dict[str, Any] | None:
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if commit.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True,
            timeout=10,
        )  # fmt: skip
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None


def _metadata(settings: Settings, command_line: str, seconds: float) -> dict[str, Any]:
    hardware = describe_hardware()
    return {
        **records.run_metadata(command_line),
        "git": _git_commit(),
        "hardware": hardware.to_dict(),
        "cudnn_version": torch.backends.cudnn.version() if on_gpus() else None,
        "settings": {
            "devices": settings.devices,
            "implementations": settings.implementations,
            "warmup": settings.warmup,
            "steps": settings.steps,
            "timeline_steps": settings.timeline_steps,
            "lr": settings.lr,
            "seed": settings.seed,
            "notes": settings.notes,
        },
        "nccl_env": {k: os.environ.get(k) for k in NCCL_ENV} if on_gpus() else {},
        "duration_s": round(seconds, 1),
        "timing": "median of per-step wall times; each step ends with a synchronize of every "
        "device used; DDP: the slowest rank per step",
    }


def write_plots(report: dict[str, Any], out: Path) -> list[str]:
    """Scaling, step time, timeline and phase plots per group; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")  # a command line run never needs a window
    import matplotlib.pyplot as plt

    from learn_parallel.lab.plots import (
        plot_implementations,
        plot_phase_breakdown,
        plot_scaling,
        plot_timeline,
    )
    from learn_parallel.lab.timing import Hardware, Timeline

    hardware = Hardware.from_dict(report["meta"]["hardware"])
    written = []

    def save(fig: Any, name: str) -> None:
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(name)

    for group in report["groups"]:
        key, title = group["key"], group["title"]
        rows = [r for r in report["results"] if r["group"] == key]
        save(plot_scaling(rows, hardware, title), f"{key}-scaling.png")
        save(plot_implementations(rows, hardware, title), f"{key}-step-time.png")
        recorded = [
            t for t in report["timelines"]
            if t["group"] == key and t["implementation"] == "learn_parallel"
        ]  # fmt: skip
        if recorded:
            widest = max(recorded, key=lambda t: t["devices"])
            timeline = Timeline.from_dict(widest["timeline"])
            what = "learn_parallel.DataParallel"
            save(plot_timeline(timeline, title=f"{what}, one training step per device\n{title}"),
                 f"{key}-timeline.png")  # fmt: skip
            save(
                plot_phase_breakdown(timeline, title=f"{what}, time per phase and device\n{title}"),
                f"{key}-phases.png",
            )
    return written


def summary_table(report: dict[str, Any]) -> str:
    """The printed table: step time, throughput, and time ratios at the same device count."""
    lines = []
    for group in report["groups"]:
        rows = [r for r in report["results"] if r["group"] == group["key"]]
        lines.append(f"\n{group['title']}  ({report['meta']['hardware']['label']})")
        lines.append(
            f"{'implementation':<30}{'devices':>8}{'step ms':>10}{'samples/s':>12}"
            f"{'÷ torch DP':>12}{'÷ DDP':>8}"
        )

        def reference(impl: str, n: int, rows: list = rows) -> float | None:
            match = [r for r in rows if r["implementation"] == impl and r["devices"] == n]
            return match[0].get("step_ms") if match and match[0]["status"] == "ok" else None

        for r in sorted(
            rows, key=lambda r: (r["devices"], IMPLEMENTATIONS.index(r["implementation"]))
        ):
            name = r["implementation"]
            if r["status"] == "not applicable":
                lines.append(f"{name:<30}{r['devices']:>8}  n/a (GPUs only)")
                continue
            if r["status"] != "ok":
                lines.append(f"{name:<30}{r['devices']:>8}  failed: {r['note'][:200]}")
                continue
            ratios = []
            for ref in ("torch_dp", "ddp"):
                base = reference(ref, r["devices"])
                ratios.append(f"{r['step_ms'] / base:.2f}" if base else "-")
            lines.append(
                f"{name:<30}{r['devices']:>8}{r['step_ms']:>10.2f}{r['samples_per_s']:>12.0f}"
                f"{ratios[0]:>12}{ratios[1]:>8}"
            )
    lines.append(
        "\n÷ torch DP, ÷ DDP: this step time divided by theirs at the same device count "
        "(below 1 is faster)."
    )
    return "\n".join(lines)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m learn_parallel bench")
    parser.usage = "%(prog)s [options]"  # each option is explained below; errors stay short
    parser.description = plain(__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_arguments(parser)
    return parser


def run_cli(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run from parsed options, print the summary table; ``argv`` is kept for the record."""
    settings = settings_from_args(args)
    command_line = shlex.join(["python", "-m", "learn_parallel", "bench", *argv])
    report = run(settings, command_line)
    print(summary_table(report))
    if not on_gpus():
        print("Devices are simulated on the CPU: these are host timings, not GPU times.")
    seconds = report["meta"]["duration_s"]
    print(f"\nWrote {settings.out / 'bench.json'} and {len(report['plots'])} plots in {seconds} s.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m learn_parallel.lab.bench``: the same as ``python -m learn_parallel bench``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = argument_error(args)
    if problem:
        parser.error(problem)
    return run_cli(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
