"""The parts of ``experiments/persistent_workers.py`` that probe one thread's first call.

`runner_step` builds the training step every runner times; `first_call_probes` times a
call in a brand-new thread against the same call again; `profile_steps` profiles one
fresh-thread step and one persistent-thread step, and `only_in_first` lists what the
fresh step's profile has more of: what a fresh thread rebuilds.
"""

from __future__ import annotations

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
from learn_parallel.devices import Device, synchronize
from learn_parallel.lab.persistent_workers import PersistentThreads, job_of, run_fresh_threads
from learn_parallel.lab.trace import profiler
from learn_parallel.lab.workloads import Workload, build_model, loss_function, make_batch


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


def first_call_probes(device: Device, resnet: Workload, rows: int) -> dict[str, Any]:
    """One ResNet-18 stem convolution, one MLP matmul and one whole forward of ``resnet``'s
    model, on ``device``. All three use the probe's own row count (256 on CUDA, 4 elsewhere):
    the line below replaces ``rows``, and each result's key names the rows it ran."""
    dev = device.torch_device
    # The ResNet-18 stem on half of a 2-GPU batch; small on simulated devices.
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
    model = build_model(resnet).to(dev)
    x, _ = make_batch(resnet, rows, dev)

    def forward() -> None:  # grad mode is per thread: a new thread starts with it on
        with torch.no_grad():
            model(x)

    for benchmark in (False, True):
        torch.backends.cudnn.benchmark = benchmark
        on = "on" if benchmark else "off"
        result[f"{resnet.resolved().model} forward, {rows} rows, cudnn.benchmark {on}"] = (
            first_call_ms(forward, device)
        )
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
