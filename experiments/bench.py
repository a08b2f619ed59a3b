"""The benchmark's command line: ``bench.json``, PNG plots and a printed table.

    python -m experiments.bench --devices 1,2,4 --out out/bench     (from a clone)

Times one device, learn_parallel.DataParallel, torch.nn.DataParallel, the ladder's
ReplicatedStep and torch's DDP side by side (`experiments.benchmark.run`)
and writes what it measured under ``--out``: ``bench.json`` (numbers, timelines,
hardware, command, git commit) and the plots, then prints the table (both drawn by
`experiments.bench_report`). ``book/data/record_gpu_runs.sh`` (part ``bench``) records it
on GPUs for the performance chapter.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from experiments import benchmark as bench
from experiments import write_record
from experiments.bench_report import summary_table, write_plots
from learn_parallel.lab.workloads import CONV_MODELS

DESCRIPTION = (
    "Time one training step on one device, with learn_parallel.DataParallel, with "
    "torch.nn.DataParallel, with ReplicatedStep (DDP's way of training, in one process) and "
    "with torch's DistributedDataParallel, at each device count; "
    "write bench.json and PNG plots under --out and print a table."
)
ROOT = Path(__file__).resolve().parents[1]
MEASURED = {  # what --help says each implementation is
    "single": "one device, no wrapper",
    "learn_parallel": "learn_parallel.DataParallel",
    "torch_dp": "torch.nn.DataParallel",
    "replicated": "learn_parallel.ladder.ReplicatedStep, the ladder chapter's top rung: one "
    "process trains a replica per device the way DDP's processes do, each device reading its "
    "own slice of the batch",
    "ddp": "torch's DistributedDataParallel, one process per device",
}


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


def build_parser() -> argparse.ArgumentParser:
    """Every option; unset sizes and lengths get GPU defaults, smaller CPU ones, or --quick's."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.bench", usage="%(prog)s [options]", description=DESCRIPTION
    )
    add = parser.add_argument
    add(
        "--devices",
        type=_int_list,
        help="device counts to measure, e.g. 1,2,4 (default: 1, 2, 4 ... up to every GPU, or "
        "every simulated device without GPUs; --quick: 1,2)",
    )
    add(
        "--workloads",
        type=_choices(("mlp", "conv")),
        default=["mlp", "conv"],
        help="comma-separated: mlp (Linear layers) and/or conv (ResNet-18 or a small CNN); "
        "default mlp,conv",
    )
    add(
        "--implementations",
        type=_choices(bench.IMPLEMENTATIONS),
        default=list(bench.IMPLEMENTATIONS),
        help="comma-separated subset of "
        + ", ".join(f"{k} ({v})" for k, v in MEASURED.items())
        + f"; default: all {len(MEASURED)}",
    )
    add(
        "--cudnn-benchmark",
        choices=("off", "on", "both"),
        help="torch.backends.cudnn.benchmark for the conv net on GPUs; 'both' measures it "
        "twice, since torch.nn.DataParallel's fresh threads re-tune every step with it on "
        "(default: both on GPUs, off elsewhere)",
    )
    add("--quick", action="store_true", help="tiny models and few steps, for a first look")
    add("--warmup", type=int, help="untimed steps first (default 5; CPU 2; quick 2)")
    add("--steps", type=int, help="timed steps; the median is reported (default 20; CPU 5)")
    add(
        "--timeline-steps",
        type=int,
        help="steps recorded per device for the timeline plots, after the timed ones "
        "(default 3; quick 2; 0 turns recording off)",
    )
    add(
        "--ddp-timeout",
        type=float,
        default=300.0,
        help="seconds one DDP launch (one device count's workloads) may take before its "
        "processes are stopped and its rows marked failed (default 300)",
    )
    add("--mlp-batch", type=int, help="MLP global batch (default 4096; CPU 512; quick 64)")
    add("--mlp-width", type=int, help="MLP features per layer (default 2048; CPU 512; quick 128)")
    add("--mlp-layers", type=int, help="MLP Linear layers (default 4)")
    add("--conv-batch", type=int, help="conv net global batch (default 512; CPU 32; quick 16)")
    add("--image-size", type=int, help="conv net image height and width (default 128; CPU 32)")
    add(
        "--conv-model",
        choices=CONV_MODELS,
        help="resnet18 (needs torchvision), small_cnn (the package's own), or auto: resnet18 "
        "when torchvision imports (default auto; quick small_cnn)",
    )
    add("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    add("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    add(
        "--out",
        type=Path,
        default=Path("out/bench"),
        help="folder for bench.json and the PNG plots (default out/bench)",
    )
    add("--no-plots", action="store_true", help="write bench.json only")
    add(
        "--no-gpu-work",
        action="store_true",
        help="skip the profiled pass after all timing that gives each GPU bar its GPU work",
    )
    add("--no-progress", action="store_true", help="print no progress lines")
    add(
        "--trace",
        type=Path,
        metavar="PATH",
        help="also profile two steps of each DataParallel on the most devices, after all "
        "timing, and write Chrome/Perfetto traces next to PATH "
        "(<stem>-<group>-<implementation>-<devices>.json)",
    )
    return parser


def argument_error(args: argparse.Namespace) -> str | None:
    """What in ``args`` cannot run on this machine, in one line; or None."""
    try:
        problem = bench.device_count_error(max(args.devices or [1]))
    except ValueError as error:  # a bad LEARN_PARALLEL_SIMULATED_DEVICES
        return str(error)
    if problem:
        return f"argument --devices: {problem}"
    resnet = "conv" in args.workloads and args.conv_model == "resnet18"
    if resnet and importlib.util.find_spec("torchvision") is None:
        return (
            "argument --conv-model: resnet18 needs torchvision, which is not installed "
            "(pip install torchvision, or --conv-model small_cnn)"
        )
    return None


def settings_from_args(args: argparse.Namespace) -> bench.Settings:
    sizes = {
        "mlp": {"batch": args.mlp_batch, "width": args.mlp_width, "layers": args.mlp_layers},
        "conv": {"batch": args.conv_batch, "image_size": args.image_size, "model": args.conv_model},
    }
    return bench.settings(
        quick=args.quick,
        devices=args.devices,
        workloads=args.workloads,
        implementations=args.implementations,
        cudnn_benchmark=args.cudnn_benchmark,
        warmup=args.warmup,
        steps=args.steps,
        timeline_steps=args.timeline_steps,
        sizes={k: {f: v for f, v in given.items() if v is not None} for k, given in sizes.items()},
        lr=args.lr,
        seed=args.seed,
        ddp_timeout=args.ddp_timeout,
        trace=args.trace,
        gpu_work=not args.no_gpu_work,
    )


def progress_line(done: int, total: int, what: str) -> None:
    print(f"[{done + 1}/{total}] {what} ...", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = argument_error(args)
    if problem:
        parser.error(problem)
    command = shlex.join(["python", "-m", "experiments.bench", *argv])
    report = bench.run(
        settings_from_args(args), command, None if args.no_progress else progress_line
    )
    args.out.mkdir(parents=True, exist_ok=True)
    report["plots"] = [] if args.no_plots else write_plots(report, args.out)
    write_record(args.out, "bench.json", report)
    print(summary_table(report))
    if report["meta"]["cpu_threads"]:
        print(report["meta"]["cpu_threads"])
    if not bench.on_gpus():
        print("Devices are simulated on the CPU: these are host timings, not GPU times.")
    seconds = report["meta"]["duration_s"]
    print(f"\nWrote {args.out / 'bench.json'} and {len(report['plots'])} plots in {seconds} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
