"""The ladder (one process, rung by rung, up to DDP) or the clone set, recorded on GPUs.

    python -m experiments.ladder --out DIR [--set ladder|clone] [--devices 2] [--repeats 5]
                                 [--steps 30] [--quick] [--no-ddp] [--workloads conv,mlp]
                                 [--no-gpu-work]

Feeds the ladder chapter (``ladder.json``) and the libtorch_replicate chapter
(``clone.json``, with the host time of one ``replicate`` per strategy):
``book/data/record_gpu_runs.sh`` (parts ``ladder`` and ``clone``) runs it. Every rung and
DDP are measured interleaved, ``--repeats`` rounds of ``--steps`` timed steps each; after the
last round is timed, a profiled pass adds the GPU work inside the timelines' bars. The rungs and
their runner are `learn_parallel.lab.ladder`, which the chapters also run live.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

import torch

from experiments import driver_parser
from experiments.ddp_times import time_ddp
from learn_parallel.devices import SIMULATED_DEVICES_ENV, device_count
from learn_parallel.lab.bridges import ladder_table
from learn_parallel.lab.ladder import default_workloads, run


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.ladder", __doc__, "ladder.json or clone.json")
    parser.add_argument("--set", choices=("ladder", "clone"), default="ladder", dest="which")
    parser.add_argument("--devices", type=int, default=2, help="device count (default 2)")
    parser.add_argument("--workloads", default="conv,mlp", help="conv,mlp (default both)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="timed steps (GPU 30, CPU 5)")
    parser.add_argument("--timeline-steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny models, for tests")
    parser.add_argument("--no-ddp", action="store_true", help="leave DDP's rows out")
    parser.add_argument("--ddp-timeout", type=float, default=300.0, help="per round, seconds")
    parser.add_argument(
        "--no-gpu-work", action="store_true", help="no profiled pass (no GPU work per bar)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--repeats and --steps must be at least 1")
    on_gpu = torch.cuda.is_available()
    if args.devices > device_count():
        if on_gpu:
            raise SystemExit(f"--devices {args.devices}: only {device_count()} GPUs are visible")
        os.environ[SIMULATED_DEVICES_ENV] = str(args.devices)
    kinds = [k.strip() for k in args.workloads.split(",") if k.strip()]
    workloads = [w for w in default_workloads(on_gpu, args.quick) if w.kind in kinds]
    if not workloads:
        raise SystemExit(f"--workloads {args.workloads!r}: choose from conv,mlp")
    report = run(
        args.which,
        workloads,
        args.devices,
        args.out,
        repeats=args.repeats,
        warmup=args.warmup,
        steps=args.steps or (30 if on_gpu else 5),
        timeline_steps=args.timeline_steps,
        ddp=None if args.no_ddp else time_ddp,
        ddp_timeout=args.ddp_timeout,
        command=shlex.join(["python", "-m", "experiments.ladder", *argv]),
        gpu_work=not args.no_gpu_work,
    )
    print(ladder_table(report))
    if not on_gpu:
        print("Devices are simulated on the CPU: host timings, not GPU times.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
