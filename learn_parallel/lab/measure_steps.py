"""Whole calls and steps: parallel_apply, data_parallel, performance and options chapters.

The two timelines record a few steps per device (their GPU work, where a recording wants
it, comes from a `kernels.ProfiledPass` run after everything is timed); the rest time whole
calls or steps on the host clock with every device idle before and after.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike
from learn_parallel.lab import chain_bench
from learn_parallel.lab.kernels import ProfiledPass
from learn_parallel.lab.measurement import (
    Measurement,
    counts,
    devices_of,
    measured,
    synced_clock,
    wall_ms,
)
from learn_parallel.lab.persistent_workers import run_fresh_threads
from learn_parallel.lab.steps import make_step, one_device, record_timeline
from learn_parallel.lab.timeline import Timeline, describe_hardware
from learn_parallel.lab.timing import phase, step_times_ms
from learn_parallel.lab.workloads import SIZES
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate
from learn_parallel.scatter_gather import scatter


def parallel_apply_timeline(
    devices: Sequence[DeviceLike] | None = None, later: ProfiledPass | None = None
) -> Timeline:
    """Parallel-apply chapter: each replica's forward pass, three steps, one row per device;
    ``later`` (a recording's pass) adds the GPU work inside each bar after all timing."""
    devs = devices_of(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(source)
    ids = [d.index for d in devs]
    pieces = scatter(torch.randn(4096, 256, device=source), ids)
    replicas = replicate(net, ids, detach=True)

    def step() -> None:
        with torch.no_grad():
            parallel_apply(replicas, pieces)

    step()  # warm up: first kernels, worker threads
    timeline = record_timeline(step, devs, 3)
    if later is not None:
        later.gpu_work(timeline, lambda: step, devs, 3)
    return timeline


def training_timeline(
    devices: Sequence[DeviceLike] | None = None, later: ProfiledPass | None = None
) -> Timeline:
    """DataParallel chapter: every phase of a training step, on every device (``later`` as
    in `parallel_apply_timeline`)."""
    devs = devices_of(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).to(source)
    wrapped = DataParallel(net, [d.index for d in devs])
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    x, y = torch.randn(4096, 512, device=source), torch.randn(4096, 512, device=source)

    def step() -> None:
        out = wrapped(x)
        # The loss and the optimizer step run on the first device only (the output is
        # gathered there and the parameters live there); backward runs everywhere.
        with phase("loss", devs[0]):
            loss = nn.functional.mse_loss(out, y)
        with phase("backward"):
            loss.backward()
        with phase("optimizer", devs[0]):
            opt.step()
            opt.zero_grad()

    timeline = record_timeline(step, devs, 4)  # the plots show the last step; the first warms up
    if later is not None:
        later.gpu_work(timeline, lambda: step, devs, 4)
    return timeline


def wrapper_scaling(devices: Sequence[DeviceLike] | None = None) -> list[dict[str, Any]]:
    """Performance chapter: one training step of the small MLP with no wrapper, ours and
    torch's DataParallel on 1, 2 and 4 devices; rows as in a recorded ``bench.json``, each
    naming its ``clock``."""
    devs = devices_of(devices)
    workload = SIZES["quick"]["mlp"].resolved()
    runs = [("single", one_device, 1)] + [
        (name, wrap, n)
        for n in (1, 2, 4)
        if n <= len(devs)
        for name, wrap in (("learn_parallel", DataParallel), ("torch_dp", torch.nn.DataParallel))
    ]
    rows = []
    for name, wrap, n in runs:
        times = step_times_ms(make_step(workload, devs[:n], wrap)[0], devs[:n], warmup=2, steps=5)
        ms = statistics.median(times)
        rows.append({"implementation": name, "devices": n, "status": "ok", "step_ms": ms})
        rows[-1] |= {"step_ms_all": times, "samples_per_s": workload.batch / (ms / 1e3)}
        rows[-1]["clock"] = synced_clock(devs[:n])
    return rows


def _time_apply_calls(devs: Sequence[Device]) -> list[float]:
    """ms per call: persistent workers, a thread per call, and (GPUs) torch's version."""
    net = nn.Linear(8, 8).to(devs[0].torch_device)
    replicas = replicate(net, [d.index for d in devs], detach=True)
    inputs = [(torch.randn(2, 8, device=d.torch_device),) for d in devs]
    calls = [
        lambda: parallel_apply(replicas, inputs),
        lambda: run_fresh_threads([lambda r=r, x=x: r(*x) for r, x in zip(replicas, inputs)]),
    ]
    if devs[0].type == "cuda":
        calls.append(lambda: torch.nn.parallel.parallel_apply(replicas, inputs))
    with torch.no_grad():
        return [wall_ms(call, devs, repeats=200) for call in calls]


@measured
def worker_overhead(devices: Sequence[DeviceLike] | None = None) -> Measurement:
    """Performance chapter: one parallel_apply call on replicas that do almost nothing, so
    what is timed is the machinery: persistent workers vs a thread started per replica (and,
    on GPUs, torch.nn.parallel.parallel_apply, which does the latter)."""
    devs = devices_of(devices)
    sweep = counts(devs)
    series: dict[str, list[float]] = {"persistent workers (learn_parallel)": []}
    series["a new thread per replica per call"] = []
    if devs[0].type == "cuda":
        series["torch.nn.parallel.parallel_apply"] = []
    for n in sweep:
        for name, ms in zip(series, _time_apply_calls(devs[:n])):
            series[name].append(1e3 * ms)
    return Measurement(
        "worker_overhead",
        "One parallel_apply call on tiny replicas (Linear(8, 8), 2 rows each)",
        "devices",
        "median time per call (µs)",
        [str(n) for n in sweep],
        series,
        describe_hardware(devs).label(),
        numeric_x=True,
    )


def chain(devices: Sequence[DeviceLike] | None = None, config: Any = None) -> Measurement:
    """Options chapter: the two-network chain of chain_bench, kept scattered vs regathered
    (timed by `step_times_ms`: the host clock, every device synchronized around each step)."""
    devs = devices_of(devices)
    config = config or chain_bench.Config(
        batch=64, image_size=32, features=32, classes=10, warmup=2, steps=7
    )
    results = [chain_bench.measure(n, config) for n in counts(devs) if n >= 2]
    hardware = describe_hardware(devs).label()
    return chain_measurement(results, hardware, synced_clock(devs), config.feature_map_mb)


def chain_measurement(
    results: Sequence[dict], hardware: str, clock: str, feature_map_mb: float
) -> Measurement:
    """A Measurement from chain_bench results (live ones, or a recorded chain_bench.json's)."""
    return Measurement(
        "chain",
        f"One training step of netA -> netB, feature map {feature_map_mb:,.1f} MB",
        "devices",
        "median step time (ms)",
        [str(r["devices"]) for r in results],
        {
            "kept scattered": [r["scattered_median_ms"] for r in results],
            "gathered, then scattered again": [r["regathered_median_ms"] for r in results],
        },
        f"{hardware} ({clock})",
        numeric_x=True,
        clock=clock,
    )
