"""Our DDP beside torch's DDP and our DataParallel on GPUs: ``distributed.json``.

    python -m experiments.ddp_timeline --out DIR [--world 2] [--steps 30] [--quick]

Feeds the distributed chapter's recorded step times and per-rank timelines (the chapter
runs `learn_parallel.lab.ddp_timeline.compare` live beside them):
``book/data/record_gpu_runs.sh`` (part ``ddp``) runs it on 2 GPUs, with NCCL.
Writes ``DIR/distributed.json`` and a PNG timeline per workload; the DataParallel timelines'
GPU work comes from a profiled pass after all timing.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

import torch

from experiments import driver_parser, write_record
from learn_parallel.lab.ddp_timeline import compare, plot_side_by_side, step_table
from learn_parallel.lab.workloads import standard_workloads
from learn_parallel.ladder.distributed import DEFAULT_BUCKET_CAP_MB

RECORD_FILE = "distributed.json"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.ddp_timeline", __doc__, RECORD_FILE)
    parser.add_argument("--world", type=int, default=2, help="processes (GPUs); default 2")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    parser.add_argument("--timeline-steps", type=int, default=3)
    parser.add_argument("--bucket-cap-mb", type=float, default=DEFAULT_BUCKET_CAP_MB)
    parser.add_argument("--quick", action="store_true", help="small models (CPU, tests)")
    parser.add_argument("--timeout", type=float, default=200.0, help="seconds for the ranks")
    args = parser.parse_args(argv)
    size = "quick" if args.quick or not torch.cuda.is_available() else "gpu"
    timing = (args.warmup, args.steps, args.timeline_steps, args.bucket_cap_mb)
    report = compare(
        standard_workloads(size), args.world, *timing, timeout_s=args.timeout, gpu_work=True
    )
    report["command"] = shlex.join(["python", "-m", "experiments.ddp_timeline", *argv])
    write_record(args.out, RECORD_FILE, report)
    print(step_table(report))
    try:
        import matplotlib

        matplotlib.use("Agg")
        for key in report["workloads"]:
            if "dp_timeline" in report["workloads"][key]:
                fig = plot_side_by_side(report, key)
                fig.savefig(args.out / f"ddp-{key}-timeline.png", dpi=110)
    except Exception as error:  # noqa: BLE001 - the JSON is what matters; say why no plot
        print(f"plots skipped: {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
