"""What a profiler that ran earlier in a process costs the steps timed after it.

    python -m experiments.profiler_tax --out DIR [--devices 2] [--rounds 3] [--steps 30]

Each round runs two fresh processes, one after the other (which goes first alternates):
in both, every ladder rung (`learn_parallel.lab.ladder_rungs`) is built afresh and timed
for ``--steps`` steps of the benchmark's MLP, as `learn_parallel.lab.ladder` times them;
in the ``taxed`` one, three steps of every rung first run under torch.profiler, as the
ladder's timelines did before nothing was timed after a profiler. ``profiler_tax.json``
keeps each rung's median per round in both, and the table printed at the end is the
before/after of ``book/data/README.md`` (part ``profilertax`` of the recording script).
"""

from __future__ import annotations

import shlex
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import torch

from experiments import driver_parser, first_devices, write_record
from learn_parallel.lab import trace
from learn_parallel.lab.ladder import default_workloads
from learn_parallel.lab.ladder_rungs import LADDER
from learn_parallel.lab.processes import run_ranks
from learn_parallel.lab.spread import Spread, compare
from learn_parallel.lab.steps import failure_becomes_row
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.lab.timing import step_times_ms

WAYS = ("clean", "taxed")


def one_round(rank: int, world: int, config: dict[str, Any]) -> dict[str, float | str]:
    """One process: (taxed: profile every rung first, then) time every rung; rung -> median."""
    devices = first_devices(config["devices"])
    table = default_workloads(torch.cuda.is_available(), config["quick"])
    workload = next(w for w in table if w.kind == config["workload"])
    rungs = [r for r in LADDER if torch.cuda.is_available() or not r.needs_cuda]
    rungs.sort(key=lambda r: r.measure_last)  # a failed capture can spoil the process's RNG
    if config["taxed"]:
        for rung in rungs:
            step, _ = rung.make(workload, devices)
            with trace.profiler():
                for _ in range(3):
                    step()
    medians: dict[str, float | str] = {}
    with trace.measuring_the_tax():
        for rung in rungs:
            row: dict[str, Any] = {"status": "ok"}
            with failure_becomes_row(row):
                step, _ = rung.make(workload, devices)
                times = step_times_ms(step, devices, config["warmup"], config["steps"])
                medians[rung.name] = statistics.median(times)
            if row["status"] != "ok":
                medians[rung.name] = row["note"]
    return medians


def table(rungs: dict[str, dict[str, list]]) -> str:
    """Markdown: per rung, each way's median of the rounds' medians (their range), a verdict."""
    lines = ["| rung | clean (no profiler before) | taxed (profiled first) | taxed vs clean |"]
    lines.append("| --- | --- | --- | --- |")
    for name, ways in rungs.items():
        if not all(ways[w] and all(isinstance(v, float) for v in ways[w]) for w in WAYS):
            lines.append(f"| {name} | failed or not run | | |")
            continue
        spreads = {w: Spread.of(ways[w]) for w in WAYS}
        cells = [f"{s.median:.2f} ms ({s.low:.2f}-{s.high:.2f})" for s in spreads.values()]
        verdict = compare(ways["taxed"], ways["clean"]) if len(ways["clean"]) > 1 else "one round"
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {verdict} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.profiler_tax", __doc__, "profiler_tax.json", devices=2)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of processes (default 3)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per rung")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workload", choices=("mlp", "conv"), default="mlp")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per process")
    parser.add_argument("--quick", action="store_true", help="tiny models (tests)")
    args = parser.parse_args(argv)
    devices = first_devices(args.devices)
    config = {"devices": len(devices), "workload": args.workload, "quick": args.quick}
    config |= {"steps": args.steps, "warmup": args.warmup}
    rungs: dict[str, dict[str, list]] = {}
    for number in range(args.rounds):
        for way in WAYS if number % 2 == 0 else WAYS[::-1]:
            settings = ({**config, "taxed": way == "taxed"},)
            (medians,) = run_ranks(one_round, 1, settings, "gloo", args.timeout)
            for name, value in medians.items():
                rungs.setdefault(name, {w: [] for w in WAYS})[way].append(value)
    report = {
        "hardware": describe_hardware(devices).to_dict(),
        "command": shlex.join(["python", "-m", "experiments.profiler_tax", *argv]),
        "settings": config | {"rounds": args.rounds},
        "clock": "host clock, GPUs synchronized (step_times_ms); per rung, each round's median",
        "rungs": rungs,
    }
    write_record(args.out, "profiler_tax.json", report)
    print(table(rungs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
