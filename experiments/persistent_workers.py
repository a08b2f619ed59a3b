"""Why persistent worker threads win: the same replica forwards, fresh threads vs kept ones.

    python -m experiments.persistent_workers --out DIR [--devices 2] [--steps 10]

One training step is scatter, replicate, the replicas' forwards, gather, loss
and backward (learn_parallel's functions). Only how the forwards are run
changes, and every runner calls the very same job (``with
torch.cuda.device(i): replica(piece)``):

* ``fresh threads``: a new ``threading.Thread`` per replica per step, as
  ``torch.nn.parallel.parallel_apply`` does;
* ``persistent threads``: one thread per device for the whole run
  (a single-worker ``ThreadPoolExecutor`` each), as ``learn_parallel`` does;
* ``caller thread``: every forward in turn in the calling thread (no
  concurrency, one long-lived thread), a control.

For ResNet-18 and the MLP of `learn_parallel.lab.workloads`, with
``torch.backends.cudnn.benchmark`` off and on, it records the median step
time and the median host time of the forwards (start of the first job to end
of the last). Then, on the first device only, the first call of one ResNet
convolution and one MLP matmul in a brand-new thread vs the same call again in
a thread that has already run it. Last, ``torch.profiler`` profiles one
fresh-thread step and one persistent-thread step of ResNet-18 (benchmark off
and on) and stores, per step, how many times each CUDA runtime call and each
GPU kernel appears: what a fresh thread rebuilds shows up as calls and kernels
that only its step has.

Everything goes to ``DIR/persistent_workers.json`` (plus profiler tables as
text), which the performance chapter reads (``book/data/record_gpu_runs.sh``, part
``workers``, runs it on 2 GPUs). On simulated devices it runs too (small models, no profile of CUDA
calls), to check the code, not to measure anything about GPUs.
"""

from __future__ import annotations

import shlex
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

import learn_parallel as lp
from experiments import driver_parser, first_devices, write_record
from learn_parallel.devices import Device, synchronize
from learn_parallel.lab import provenance
from learn_parallel.lab.persistent_workers import (
    PersistentThreads,
    job_of,
    run_fresh_threads,
    run_in_caller,
)
from learn_parallel.lab.timing import describe_hardware, step_times_ms
from learn_parallel.lab.trace import profiler
from learn_parallel.lab.workloads import (
    Workload,
    build_model,
    loss_function,
    make_batch,
    standard_workloads,
)


def workloads_for(devices: Sequence[Device]) -> dict[str, Workload]:
    """ResNet-18 and the MLP at GPU size (`workloads.SIZES`), quick ones on simulated devices."""
    table = standard_workloads("gpu" if devices[0].type == "cuda" else "quick")
    return {"resnet18": table["conv"], "mlp": table["mlp"]}


def runner_step(workload: Workload, devices: Sequence[Device], runner: Callable, seed: int = 0):
    """One training step whose replica forwards go through ``runner``; returns (step, timings)."""
    ids = [d.index for d in devices]
    source = devices[0].torch_device
    model = build_model(workload, seed).to(source)
    x, y = make_batch(workload, workload.batch, source, seed)
    forward_ms: list[float] = []

    def step() -> None:
        pieces = lp.scatter(x, ids)
        replicas = lp.replicate(model, ids[: len(pieces)])
        jobs = [job_of(r, p, d) for r, p, d in zip(replicas, pieces, devices)]
        start = time.perf_counter()
        outputs = runner(jobs)
        forward_ms.append((time.perf_counter() - start) * 1e3)
        loss = loss_function(workload, lp.gather(outputs, ids[0]), y)
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step, forward_ms


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


# [first-call]
def first_call_ms(call: Callable[[], Any], device: Device, repeats: int = 3) -> dict[str, Any]:
    """Host ms of ``call`` (synchronised) in brand-new threads vs again in the same thread."""

    def timed() -> float:
        synchronize([device])
        start = time.perf_counter()
        call()
        synchronize([device])
        return (time.perf_counter() - start) * 1e3

    def in_new_thread() -> tuple[float, float]:
        out: list[float] = []

        def body() -> None:
            with torch.cuda.device(device.index) if device.type == "cuda" else nullcontext():
                out.append(timed())  # this thread's first call
                out.append(timed())  # the same call again, same thread

        t = threading.Thread(target=body)
        t.start()
        t.join()
        return out[0], out[1]

    timed()  # the process has run it once: only per-thread state is missing below
    pairs = [in_new_thread() for _ in range(repeats)]
    return {
        "first_call_in_new_thread_ms": [p[0] for p in pairs],
        "second_call_same_thread_ms": [p[1] for p in pairs],
    }


# [first-call]


def first_call_probes(device: Device) -> dict[str, Any]:
    """One ResNet-18 stem convolution and one MLP matmul, on ``device``."""
    dev = device.torch_device
    # The ResNet-18 stem on one replica's half batch; small on simulated devices.
    rows, size, width = (256, 128, 2048) if device.type == "cuda" else (4, 32, 256)
    conv = nn.Conv2d(3, 64, 7, 2, 3, bias=False).to(dev)
    image = torch.randn(rows, 3, size, size, device=dev)
    a, b = torch.randn(width, width, device=dev), torch.randn(width, width, device=dev)
    result = {}
    for benchmark in (False, True):
        torch.backends.cudnn.benchmark = benchmark
        with torch.no_grad():
            result[f"conv, cudnn.benchmark {'on' if benchmark else 'off'}"] = first_call_ms(
                lambda: conv(image), device
            )
    result[f"matmul {width} x {width}"] = first_call_ms(lambda: a @ b, device)
    torch.backends.cudnn.benchmark = False
    return result


def _event_counts(prof: Any) -> dict[str, dict[str, Any]]:
    """Per event name: how often it occurred, its total CPU time with and without what it
    calls (``cpu_us``, ``self_cpu_us``) and its GPU time, in µs."""
    counts: Counter = Counter()
    cpu_us: Counter = Counter()
    self_cpu_us: Counter = Counter()
    gpu_us: Counter = Counter()
    for e in prof.events():
        counts[e.name] += 1
        cpu_us[e.name] += e.cpu_time_total
        self_cpu_us[e.name] += e.self_cpu_time_total
        gpu_us[e.name] += getattr(e, "device_time_total", 0) or 0
    return {
        n: {"count": counts[n], "cpu_us": round(cpu_us[n], 1)}
        | {"self_cpu_us": round(self_cpu_us[n], 1), "gpu_us": round(gpu_us[n], 1)}
        for n in counts
    }


def profile_steps(workload: Workload, devices: Sequence[Device], out: Path) -> dict[str, Any]:
    """Profile one fresh-thread step and one persistent-thread step (after warm-up)."""
    result: dict[str, Any] = {}
    for benchmark in (False, True):
        torch.backends.cudnn.benchmark = benchmark
        persistent = PersistentThreads(len(devices))
        try:
            for name, runner in (("fresh threads", run_fresh_threads), ("persistent", persistent)):
                step, _ = runner_step(workload, devices, runner)
                step()
                step()  # warm: the process's caches, the allocator, persistent threads
                synchronize(devices)
                with profiler(cuda=devices[0].type == "cuda") as prof:
                    step()
                    synchronize(devices)
                key = f"{name}, cudnn.benchmark {'on' if benchmark else 'off'}"
                result[key] = _event_counts(prof)
                stem = key.replace(", ", "-").replace(" ", "-").replace(".", "")
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
                (out / f"profile-{stem}.txt").write_text(table)
        finally:
            persistent.close()
    torch.backends.cudnn.benchmark = False
    return result


def only_in_first(a: dict[str, dict], b: dict[str, dict], top: int = 30) -> list[dict]:
    """Events that occur more often in profile ``a`` than in ``b``, most extra CPU time first."""
    rows = []
    for name, ea in a.items():
        eb = b.get(name, {"count": 0, "cpu_us": 0.0, "gpu_us": 0.0})
        if ea["count"] > eb["count"]:
            rows.append(
                {
                    "name": name,
                    "count": ea["count"],
                    "count_other": eb["count"],
                    "extra_cpu_us": round(ea["cpu_us"] - eb["cpu_us"], 1),
                    "extra_gpu_us": round(ea["gpu_us"] - eb["gpu_us"], 1),
                }
            )
    rows.sort(key=lambda r: -max(r["extra_cpu_us"], r["extra_gpu_us"]))
    return rows[:top]


def run(devices: Sequence[Device], steps: int, out: Path, profile: bool = True) -> dict[str, Any]:
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
    report["first_call"] = first_call_probes(devices[0])
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
