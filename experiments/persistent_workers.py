"""Why persistent worker threads win: the same replica forwards, fresh threads vs kept ones.

    python -m experiments.persistent_workers --out DIR [--devices 2] [--steps 10]

One training step is scatter, replicate, the replicas' forwards, gather, loss and
backward (learn_parallel's functions); only how the forwards are run changes (`run`
says how, and what it records; the probes of one thread's first call and the profiles
are in ``experiments/worker_probes.py``). Everything goes to
``DIR/persistent_workers.json`` (plus profiler tables as text), which the performance
chapter reads (``book/data/record_gpu_runs.sh``, part ``workers``, runs it on every GPU).
On simulated devices it runs too (small models, no profile of CUDA calls), to check
the code, not to measure anything about GPUs.
"""

from __future__ import annotations

import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from experiments import driver_parser, first_devices, write_record
from experiments.worker_probes import first_call_probes, only_in_first, profile_steps, runner_step
from learn_parallel.devices import Device
from learn_parallel.lab import provenance
from learn_parallel.lab.persistent_workers import (
    PersistentThreads,
    run_fresh_threads,
    run_in_caller,
)
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.lab.timing import step_times_ms
from learn_parallel.lab.workloads import Workload, standard_workloads


def workloads_for(devices: Sequence[Device]) -> dict[str, Workload]:
    """ResNet-18 and the MLP at GPU size (`workloads.SIZES`), quick ones on simulated devices."""
    table = standard_workloads("gpu" if devices[0].type == "cuda" else "quick")
    return {"resnet18": table["conv"], "mlp": table["mlp"]}


def time_runner(
    workload: Workload, devices: Sequence[Device], runner: Callable, warmup: int, steps: int
) -> dict[str, Any]:
    step, forward_ms = runner_step(workload, devices, runner)
    times = step_times_ms(step, devices, warmup, steps)
    timed_forwards = forward_ms[warmup:]
    return {
        "step_ms": times,
        "median_step_ms": statistics.median(times),
        "median_forwards_host_ms": statistics.median(timed_forwards),
    }


def run(devices: Sequence[Device], steps: int, out: Path, profile: bool = True) -> dict[str, Any]:
    """Time every runner on every workload, then probe first calls and profile one step each.

    Every runner calls the very same job (``with torch.cuda.device(i): replica(piece)``):
    ``fresh threads``, a new ``threading.Thread`` per replica per step, as
    ``torch.nn.parallel.parallel_apply`` does; ``persistent threads``, one thread per
    device for the whole run (a single-worker ``ThreadPoolExecutor`` each), as
    ``learn_parallel`` does; ``caller thread``, every forward in turn in the calling
    thread (one long-lived thread: no concurrency on the host, while the GPUs still run
    the queued kernels at the same time), a control. For ResNet-18 and the MLP
    of `learn_parallel.lab.workloads`, with ``torch.backends.cudnn.benchmark`` off and on,
    it records the median step time and the median host time of the forwards (start of
    the first job to end of the last). Then, on the first device only, the first call of
    one ResNet convolution, one MLP matmul and one whole ResNet-18 replica forward in a
    brand-new thread vs the same call again in a thread that has already run it. Last,
    ``torch.profiler`` profiles one fresh-thread step and one persistent-thread step of
    ResNet-18 (benchmark off and on) and stores, per step, how many times each CUDA runtime
    call and each GPU kernel appears: what a fresh thread rebuilds shows up as calls and
    kernels only its step has.
    """
    table = workloads_for(devices)
    report: dict[str, Any] = {
        "hardware": describe_hardware(devices).__dict__,
        **provenance.run_metadata(""),  # main fills in its command line
        "steps": steps,
        "runs": [],
    }
    for name, workload in table.items():
        for benchmark in (False, True):
            if workload.kind == "mlp" and benchmark:
                continue  # no convolutions: cudnn.benchmark changes nothing
            torch.backends.cudnn.benchmark = benchmark
            persistent = PersistentThreads(len(devices))
            runners = {
                "fresh threads": run_fresh_threads,
                "persistent threads": persistent,
                "caller thread": run_in_caller,
            }
            try:
                for runner_name, runner in runners.items():
                    row = {
                        "workload": name,
                        "describe": workload.resolved().describe(),
                        "cudnn_benchmark": benchmark,
                        "runner": runner_name,
                        **time_runner(workload, devices, runner, warmup=3, steps=steps),
                    }
                    report["runs"].append(row)
                    print(
                        f"{name:9s} benchmark {'on ' if benchmark else 'off'} {runner_name:18s}"
                        f" step {row['median_step_ms']:8.2f} ms,"
                        f" forwards (host) {row['median_forwards_host_ms']:8.2f} ms",
                        flush=True,
                    )
            finally:
                persistent.close()
    torch.backends.cudnn.benchmark = False
    resnet = table["resnet18"]
    report["first_call"] = first_call_probes(
        devices[0], resnet, resnet.resolved().batch // len(devices)
    )
    for what, r in report["first_call"].items():
        first = statistics.median(r["first_call_in_new_thread_ms"])
        again = statistics.median(r["second_call_same_thread_ms"])
        print(f"first call, {what}: new thread {first:.2f} ms, again {again:.2f} ms", flush=True)
    if profile:
        prof = profile_steps(table["resnet18"], devices, out)
        report["profile"] = {"workload": table["resnet18"].resolved().describe(), "diff": {}}
        for bench in ("off", "on"):
            fresh = prof[f"fresh threads, cudnn.benchmark {bench}"]
            kept = prof[f"persistent, cudnn.benchmark {bench}"]
            diff = only_in_first(fresh, kept)
            report["profile"]["diff"][f"cudnn.benchmark {bench}"] = diff
            print(f"profile, benchmark {bench}: calls/kernels more frequent in the fresh step")
            for row in diff[:15]:
                print(
                    f"  {row['name'][:70]:70s} {row['count']:5d} vs {row['count_other']:5d}"
                    f"  +{row['extra_cpu_us']:.0f} µs CPU +{row['extra_gpu_us']:.0f} µs GPU"
                )
        report["profile"]["events"] = prof
    return report


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.persistent_workers", __doc__, "the JSON, tables", devices=2)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per runner")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiler part")
    args = parser.parse_args(argv)
    devices = first_devices(args.devices)
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(devices, args.steps, args.out, profile=not args.no_profile)
    report["command"] = shlex.join(["python", "-m", "experiments.persistent_workers", *argv])
    write_record(args.out, "persistent_workers.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
