"""What does watching a step cost, and what does each way of watching show per device?

    python -m experiments.recorder_cost --out DIR [--devices 2] [--steps 9]

One DataParallel training step of the benchmark's MLP and ResNet-18 on ``--devices``
devices, timed the benchmark's way three ways: ``bare`` (each phase mark a no-op) and
``recorder`` (`learn_parallel.lab.timing.Recorder` on), interleaved round by round; then
``profiler`` (torch.profiler on, CPU and CUDA activity, every thread) in rounds after all
of them, since a profiler taxes every later CUDA call of its process. It also counts the
phase ranges the profiler puts on each GPU's own timeline beside the host's: the evidence
for keeping the recorder (issue 23). Writes ``DIR/recorder_cost.json`` (performance
chapter; ``book/data/record_gpu_runs.sh``, part ``recorder``).
"""

from __future__ import annotations

import shlex
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from experiments import driver_parser, first_devices, write_record
from experiments.timeline_check import make_step, workloads_for
from learn_parallel.devices import Device
from learn_parallel.lab import provenance
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.lab.timing import Recorder, step_times_ms
from learn_parallel.lab.trace import profiler

# bare: nothing listening (each phase mark is a no-op); recorder: lab.timing.Recorder on
# (CUDA events per phase and device, or the host clock on simulated devices); profiler:
# torch.profiler on (CPU and, on GPUs, CUDA activity, every thread), phases as ranges.
WAYS = ("bare", "recorder", "profiler")


def _timed(step: Callable[[], Any], devices: Sequence[Device]) -> float:
    """One step's wall time (ms), every device idle before and after (the benchmark's way)."""
    return step_times_ms(step, devices, warmup=0, steps=1)[0]


def cost(step: Callable[[], Any], devices: Sequence[Device], steps: int) -> dict[str, list]:
    """Bare and with the recorder on: every step's wall time (ms), rounds interleaved."""
    for _ in range(3):
        step()  # warm-up: kernels chosen, worker threads started
    times: dict[str, list[float]] = {way: [] for way in WAYS[:2]}
    for _ in range(steps):
        times["bare"].append(_timed(step, devices))
        with Recorder(devices=devices):
            times["recorder"].append(_timed(step, devices))
    return times


def profiled(step: Callable[[], Any], devices: Sequence[Device], steps: int) -> tuple:
    """The profiler's rounds, after every bare and recorder round of every workload: each
    step's wall time (ms) under it, and per step the phase ranges it placed per device."""
    times, annotations = [], Counter()
    for _ in range(steps):
        with profiler() as prof:
            times.append(_timed(step, devices))
        for event in prof.events():
            if event.name.startswith("learn_parallel."):
                on_gpu = event.device_type.name == "CUDA"
                where = f"cuda:{event.device_index}" if on_gpu else "host"
                annotations[f"{where} {event.name}"] += 1
    return times, {k: v / steps for k, v in sorted(annotations.items())}


def summary(times: dict[str, list[float]], ranges: dict[str, float]) -> dict[str, Any]:
    bare = statistics.median(times["bare"])
    return {
        "step_ms": times,
        "median_ms": {way: statistics.median(t) for way, t in times.items()},
        "over_bare": {way: statistics.median(t) / bare for way, t in times.items()},
        "profiler_ranges_per_step": ranges,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.recorder_cost", __doc__, "recorder_cost.json", devices=2)
    parser.add_argument("--steps", type=int, default=9, help="rounds of the three ways")
    parser.add_argument("--workloads", default="mlp,resnet18", help="comma-separated")
    args = parser.parse_args(argv)
    devices = first_devices(args.devices)
    table = workloads_for(devices)
    report: dict[str, Any] = {
        "hardware": describe_hardware(devices).to_dict(),
        **provenance.run_metadata(shlex.join(["python", "-m", "experiments.recorder_cost", *argv])),
        "workloads": {},
    }
    names = args.workloads.split(",")
    report["timing"] = (
        "bare and recorder rounds interleaved for every workload first; then the profiler's "
        "rounds, since no step is timed after a profiler has run unless it runs under one"
    )
    steps, timed = {}, {}
    for name in names:
        torch.backends.cudnn.benchmark = False
        steps[name] = make_step(table[name], devices)
        timed[name] = cost(*steps[name], args.steps)
    for name in names:  # the profiler's rounds, last
        torch.backends.cudnn.benchmark = False
        timed[name]["profiler"], ranges = profiled(*steps[name], args.steps)
        result = summary(timed[name], ranges)
        report["workloads"][name] = {"workload": table[name].resolved().describe(), **result}
        medians = ", ".join(
            f"{way} {result['median_ms'][way]:.2f} ms ({result['over_bare'][way]:.2f}x)"
            for way in WAYS
        )
        print(f"{table[name].resolved().describe()}: {medians}")
        for what, count in result["profiler_ranges_per_step"].items():
            print(f"  per step: {count:g} x {what}")
    write_record(args.out, "recorder_cost.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
