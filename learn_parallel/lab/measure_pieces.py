"""The pieces' chapters: one device's matmul, the source check, scatter, replicate, gather.

Each function times its piece on the reader's devices (GPUs or simulated) and is run on
the recorded GPUs too (`experiments.measure`): devices, source_device, scatter, replicate,
intro (each replica's forward) and gather chapters.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike
from learn_parallel.lab.measurement import (
    Measurement,
    devices_of,
    measured,
    median_ms,
    mlp,
    uses_clock,
)
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.lab.timing import Recorder
from learn_parallel.replicate import check_on_source_device, copy_to_devices
from learn_parallel.scatter_gather import gather, scatter


@measured
def matmul(devices: Sequence[DeviceLike] | None = None, n: int = 384) -> Measurement:
    """Devices chapter: the same n x n matmul timed on each device in turn."""
    devs = devices_of(devices)
    times = []
    for d in devs:
        a = torch.randn(n, n, device=d.torch_device)
        times.append(median_ms(lambda a=a: a @ a, d))
    return Measurement(
        "matmul",
        f"The same {n} x {n} matmul, timed on each device",
        "device",
        "time per matmul (ms)",
        [str(d) for d in devs],
        {"matmul": times},
        describe_hardware(devs).label(),
    )


@measured
def source_check(
    devices: Sequence[DeviceLike] | None = None, layer_counts: Sequence[int] = (1, 4, 16, 64, 128)
) -> Measurement:
    """Source-device chapter: host time of the forward check against the module's size."""
    devs = devices_of(devices)
    source = devs[0]
    counts, times = [], []
    for layers in layer_counts:
        net = mlp(8, layers, source.torch_device)
        counts.append(str(len(list(net.parameters())) + len(list(net.buffers()))))
        # The check runs on the host whatever the device: time it with the host clock.
        times.append(
            1e3 * median_ms(lambda m=net: check_on_source_device(m, source), Device("cpu"))
        )
    return Measurement(
        "source_check",
        "The source-device check, on the host",
        "parameters and buffers in the module (count)",
        "time of one check (µs, host)",
        counts,
        {"check": times},
        describe_hardware(devs).label(),
        numeric_x=True,
    )


@measured
def scatter_copy(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Scatter chapter: moving each device's slice of a rows x 1024 batch to that device."""
    devs = devices_of(devices)
    batch = torch.randn(rows, 1024, device=devs[0].torch_device)
    slices = batch.chunk(len(devs))
    times = [
        1e3 * median_ms(lambda s=s, d=d: s.to(d.torch_device), d) for s, d in zip(slices, devs)
    ]
    return Measurement(
        "scatter_copy",
        f"Moving one {' x '.join(map(str, slices[0].shape))} float slice from the first "
        "device to each device",
        "device",
        "time (µs)",
        [str(d) for d in devs[: len(slices)]],
        {"copy": times},
        describe_hardware(devs).label(),
    )


@measured
def replicate_copy(devices: Sequence[DeviceLike] | None = None, width: int = 1024) -> Measurement:
    """Replicate chapter: copying a 4-layer MLP's parameters from the source to each device."""
    devs = devices_of(devices)
    params = list(mlp(width, 4, devs[0].torch_device).parameters())
    count = sum(p.numel() for p in params) / 1e6
    times = [median_ms(lambda: copy_to_devices(params, devs[:1]), devs[0])]
    times += [median_ms(lambda d=d: copy_to_devices(params, [devs[0], d]), d) for d in devs[1:]]
    return Measurement(
        "replicate_copy",
        f"Copying {count:.1f} M parameters from the first device to each device",
        "device",
        "time (ms)",
        [str(d) for d in devs],
        {"copy": times},
        describe_hardware(devs).label(),
        note="Replica 0 keeps the originals; broadcast_coalesced still packs them into a few flat "
        "buffers, on simulated devices too (on CUDA a buffer closes once it reaches 10 MiB, so it "
        "may hold more; the simulator closes one before it would pass 10 MiB), sent by NCCL on "
        "CUDA builds, even to the source alone.",
    )


@measured
def replica_forward(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Introduction: how long each replica's forward pass takes inside DataParallel."""
    devs = devices_of(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(source)
    wrapped = DataParallel(net, [d.index for d in devs])
    batch = torch.randn(rows, 256, device=source)
    with torch.no_grad(), Recorder(devices=devs) as rec:
        for _ in rec.steps(6):
            wrapped(batch)
    uses_clock(describe_hardware(devs).clock)  # the recorder's: CUDA events on GPUs
    forward: dict[str, list[float]] = {}
    for r in rec.timeline().records:
        if r.phase == "forward" and r.step > 0:  # step 0 warms up
            forward.setdefault(r.device, []).append(r.duration_ms)
    return Measurement(
        "replica_forward",
        f"Forward pass of each replica ({-(-rows // len(devs))} rows each)",
        "device",
        "time (ms)",
        [str(d) for d in devs],
        {"forward": [statistics.median(forward[str(d)]) for d in devs]},
        describe_hardware(devs).label(),
    )


@measured
def gather_targets(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Gather chapter: joining the same pieces onto each device in turn, and onto the host."""
    devs = devices_of(devices)
    pieces = scatter(torch.randn(rows, 1024, device=devs[0].torch_device), [d.index for d in devs])
    targets = [*devs, Device("cpu")]
    times = [median_ms(lambda t=t: gather(pieces, str(t)), t) for t in targets]
    return Measurement(
        "gather_targets",
        f"Gathering {rows} x 1024 floats onto each device",
        "output device",
        "time of one gather (ms)",
        [str(t) for t in targets],
        {"gather": times},
        describe_hardware(devs).label(),
    )
