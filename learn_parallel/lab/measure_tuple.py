"""TupleParallel beside DataParallel: step time and peak memory (tuple_parallel, pitfalls).

`tuple_vs_data_parallel` times both wrappers in interleaved rounds at each device count;
`peak_memory` reads how much memory each device holds at the peak of one training step.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch
from torch import nn

from learn_parallel import sim
from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike, synchronize
from learn_parallel.lab.measurement import (
    Measurement,
    counts,
    devices_of,
    measured,
    mlp,
    uses_clock,
    wall_ms,
)
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.variants.tuple_parallel import TupleParallel, split_batch

# peak_memory's classifier by default, (rows, classes, width): on GPUs, on simulated devices
SIZES = {"cuda": (8192, 32000, 1024), "sim": (4096, 2000, 128)}


def _time_both_wrappers(
    devs: Sequence[Device], rows: int, width: int, rounds: int = 5
) -> tuple[list[float], list[float]]:
    """Each wrapper's median step time in each of ``rounds`` rounds, the two interleaved."""
    n, source = len(devs), devs[0].torch_device
    ids = [d.index for d in devs]
    x, y = torch.randn(rows, width, device=source), torch.randn(rows, width, device=source)
    net = mlp(width, 3, source)
    dp, tp = DataParallel(net, ids), TupleParallel(net, ids)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    # TupleParallel's batches arrive split (PerDeviceCollate) and on their devices (a prefetcher).
    xs = [part.to(d.torch_device) for part, d in zip(split_batch(x, n), devs)]
    ys = [part.to(d.torch_device) for part, d in zip(split_batch(y, n), devs)]

    def dp_step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(dp(x), y).backward()
        opt.step()

    def tp_step() -> None:
        opt.zero_grad(set_to_none=True)
        # Each device's loss is computed where its output is; only the scalars travel.
        losses = [nn.functional.mse_loss(o, t, reduction="sum") for o, t in zip(tp(xs), ys)]
        (sum(loss.to(source) for loss in losses) / y.numel()).backward()
        opt.step()

    times: dict[Callable[[], None], list[float]] = {dp_step: [], tp_step: []}
    for k in range(rounds):  # alternate which wrapper goes first, so neither always warms up
        for step in (dp_step, tp_step)[:: 1 if k % 2 == 0 else -1]:
            times[step].append(wall_ms(step, devs, repeats=3))
    return times[dp_step], times[tp_step]


@measured
def tuple_vs_data_parallel(
    devices: Sequence[DeviceLike] | None = None, rows: int = 4096, width: int = 512
) -> Measurement:
    """TupleParallel chapter: one training step, one batch split inside vs N batches given;
    five interleaved rounds per device count (``repeats``), the median of them plotted."""
    devs = devices_of(devices)
    sweep = counts(devs)
    repeats: dict[str, list[list[float]]] = {"DataParallel": [], "TupleParallel": []}
    for n in sweep:
        dp_rounds, tp_rounds = _time_both_wrappers(devs[:n], rows, width)
        repeats["DataParallel"].append(dp_rounds)
        repeats["TupleParallel"].append(tp_rounds)
    series = {name: [statistics.median(r) for r in per_x] for name, per_x in repeats.items()}
    return Measurement(
        "tuple_vs_data_parallel",
        f"One training step of 3 Linear layers (no activation), {rows} rows of {width} features",
        "devices",
        "median step time (ms)",
        [str(n) for n in sweep],
        series,
        describe_hardware(devs).label(),
        numeric_x=True,
        repeats=repeats,
    )


@measured
def peak_memory(
    devices: Sequence[DeviceLike] | None = None,
    rows: int | None = None,
    classes: int | None = None,
    width: int | None = None,
) -> Measurement:
    """TupleParallel and pitfalls chapters: peak memory per device in one training step.

    A classifier with ``classes`` logits per row: DataParallel gathers every logit onto the
    first device for the loss, TupleParallel leaves them where they were computed. GPUs:
    ``torch.cuda.max_memory_allocated``; simulated devices: the bytes of tensors living on
    each (no allocator rounding or caching), at smaller default sizes (the CPU does every
    device's work) that keep the logits the largest tensors of the step.
    """
    devs = devices_of(devices)
    on_gpus = devs[0].type == "cuda"
    default = SIZES["cuda" if on_gpus else "sim"]
    rows, classes, width = rows or default[0], classes or default[1], width or default[2]
    memory = torch.cuda if on_gpus else sim
    source = devs[0].torch_device
    ids = [d.index for d in devs]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, classes)).to(source)
    x = torch.randn(rows, width, device=source)
    y = torch.randint(classes, (rows,), device=source)
    xs, ys = split_batch(x, len(devs)), split_batch(y, len(devs))
    ys = [part.to(d.torch_device) for part, d in zip(ys, devs)]

    dp, tp = DataParallel(net, ids), TupleParallel(net, ids)

    # Both steps as a training loop writes them: each keeps its logits alive through backward.
    def dp_step() -> None:
        out = dp(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()

    def tp_step() -> None:
        outs = tp(list(xs))
        losses = [
            nn.functional.cross_entropy(o, t, reduction="sum").to(source) for o, t in zip(outs, ys)
        ]
        loss = sum(losses) / rows
        loss.backward()

    series = {}
    for name, step in (("DataParallel", dp_step), ("TupleParallel", tp_step)):
        step()  # warm up allocator and kernels
        net.zero_grad(set_to_none=True)
        synchronize(devs)
        base = [memory.memory_allocated(d.index) for d in devs]
        for d in devs:
            memory.reset_peak_memory_stats(d.index)
        step()
        synchronize(devs)
        series[name] = [
            (memory.max_memory_allocated(d.index) - b) / 2**20 for d, b in zip(devs, base)
        ]
        net.zero_grad(set_to_none=True)
    uses_clock("torch.cuda.max_memory_allocated" if on_gpus else "bytes of live tensors")
    return Measurement(
        "peak_memory",
        f"Extra memory at the peak of one step: {rows} rows of {width} features, {classes} logits"
        " each",
        "device",
        "peak memory above the model (MiB)",
        [str(d) for d in devs],
        series,
        describe_hardware(devs).label(),
    )
