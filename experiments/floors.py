"""What the hardware of this host allows, measured: ``floors.json``.

    python -m experiments.floors --out DIR [--quick]

Feeds the floors beside the recorded phase bars of the performance, replicate, gather,
data_parallel and ladder chapters (`learn_parallel.lab.floors` reads it back):
``book/data/record_gpu_runs.sh`` (part ``floors``) runs it on every visible GPU. It measures
copy bandwidth between every pair of GPUs and between host (pinned) and each GPU, with large
buffers; NCCL's all-reduce, broadcast and reduce over a range of sizes, with nccl-tests' bus
bandwidth; a large float32 matrix product and ResNet-18's convolutions on the first GPU, under
torch's default precision settings (recorded), cuDNN picking its fastest algorithm; and it
counts every phase's bytes and FLOPs (`experiments.floor_counts`). Every time is CUDA events
on each device's current stream, after warm-up calls, several samples kept; no profiler runs
in this process.
"""

from __future__ import annotations

import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from experiments import driver_parser, write_record
from experiments.floor_counts import all_counts
from learn_parallel.lab.timeline import describe_hardware

MiB = 2**20
# nccl-tests' bus bandwidth: algorithm bandwidth (bytes / time) times this factor of N.
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
TIMING = (
    "CUDA events on the current stream of every device involved, around `inner` calls after "
    "warm-up calls; a sample is the longest device's span / inner; median of the samples"
)


def event_samples(
    fn: Callable[[], Any], devices: Sequence[int], repeats: int = 5, inner: int = 3
) -> list[float]:
    """Milliseconds per call of ``fn``, ``repeats`` samples (see `TIMING`), two warm-up calls."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        pairs = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in devices]
        for d, (start, _) in zip(devices, pairs):
            start.record(torch.cuda.current_stream(d))
        for _ in range(inner):
            fn()
        for d, (_, end) in zip(devices, pairs):
            end.record(torch.cuda.current_stream(d))
        for _, end in pairs:
            end.synchronize()
        samples.append(max(start.elapsed_time(end) for start, end in pairs) / inner)
    return samples


def rate(nbytes: int, samples: Sequence[float]) -> float:
    """GB/s (1e9 bytes per second) of moving ``nbytes`` in the median sample's time."""
    return nbytes / (statistics.median(samples) * 1e-3) / 1e9


def copies(n: int, nbytes: int) -> dict[str, Any]:
    """Device-to-device copies: every ordered pair alone (``pairs[src][dst]``, the same device
    too), and into each device from all the others, issued as a gather issues them (``copy_``
    makes each wait for the destination's stream, so they follow one another); host-to-device
    and back with pinned host memory."""
    numel = nbytes // 4
    a = [torch.ones(numel, device=f"cuda:{d}") for d in range(n)]
    b = [torch.empty(numel, device=f"cuda:{d}") for d in range(n)]
    pairs = [
        [event_samples(lambda s=s, t=t: b[t].copy_(a[s]), sorted({s, t})) for t in range(n)]
        for s in range(n)
    ]
    share = numel // max(n - 1, 1)

    def into(t: int) -> None:
        others = [s for s in range(n) if s != t]
        for k, s in enumerate(others):
            b[t][k * share : (k + 1) * share].copy_(a[s][:share])

    into_samples = [event_samples(lambda t=t: into(t), range(n)) for t in range(n)]
    host = torch.empty(numel, pin_memory=True)
    h2d = [event_samples(lambda d=d: a[d].copy_(host, non_blocking=True), [d]) for d in range(n)]
    d2h = [event_samples(lambda d=d: host.copy_(a[d], non_blocking=True), [d]) for d in range(n)]
    into_bytes = share * 4 * (n - 1)
    return {
        "bytes": nbytes,
        "pairs_gb_s": [[rate(nbytes, s) for s in row] for row in pairs],
        "pairs_ms": pairs,
        "into_bytes": into_bytes,
        "into_gb_s": [rate(into_bytes, s) for s in into_samples],
        "into_ms": into_samples,
        "h2d_gb_s": [rate(nbytes, s) for s in h2d],
        "d2h_gb_s": [rate(nbytes, s) for s in d2h],
        "h2d_ms": h2d,
        "d2h_ms": d2h,
    }


def collectives(n: int, sizes: Sequence[int]) -> dict[str, Any]:
    """NCCL's all-reduce, broadcast (root 0) and reduce (root 0) on every visible GPU from this
    one process (``torch.cuda.nccl``, as DataParallel's replicate and reduce and ReplicatedStep
    call it), float32 buffers of each size: times, algorithm and bus bandwidth."""
    buffers = [torch.zeros(max(sizes) // 4, device=f"cuda:{d}") for d in range(n)]  # sums stay 0
    calls = {
        "all_reduce": lambda views: torch.cuda.nccl.all_reduce(views),
        "broadcast": lambda views: torch.cuda.nccl.broadcast(views, root=0),
        "reduce": lambda views: torch.cuda.nccl.reduce(views, root=0),
    }
    found: dict[str, Any] = {"devices": n, "nccl_version": _nccl_version()}
    for kind, call in calls.items():
        rows = []
        for size in sizes:
            views = [b[: size // 4] for b in buffers]
            inner = 20 if size <= MiB else 5 if size <= 16 * MiB else 2
            samples = event_samples(lambda v=views, c=call: c(v), range(n), inner=inner)
            algbw = rate(size, samples)
            rows.append(
                {"bytes": size, "ms": samples, "algbw_gb_s": algbw}
                | {"busbw_gb_s": algbw * BUS_FACTOR[kind](n)}
            )
        found[kind] = rows
    return found


def _nccl_version() -> str:
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def throughput(name: str, fn: Callable[[], Any], count: Callable[[], Any], inner: int) -> dict:
    """TFLOP/s of ``fn`` on cuda:0, its FLOPs counted by FlopCounterMode running ``count``
    (the same operation on meta tensors)."""
    with FlopCounterMode(display=False) as counter:
        count()
    samples = event_samples(fn, [0], inner=inner)
    flops = counter.get_total_flops()
    return {
        "operation": name,
        "flops": flops,
        "ms": samples,
        "tflop_s": flops / (statistics.median(samples) * 1e-3) / 1e12,
    }


# ResNet-18's 3x3 convolutions at 128 x 128 images, one per stage: (channels, height and width).
CONV_SHAPES = ((64, 32), (128, 16), (256, 8), (512, 4))


def compute(quick: bool) -> dict[str, Any]:
    """One square float32 matrix product, and ResNet-18's 3x3 convolution of each stage on 128
    images (a replica's share on four GPUs), on cuda:0; the fastest convolution is ``conv``."""
    m = 2048 if quick else 8192
    a, b = (torch.randn(m, m, device="cuda:0") for _ in range(2))
    meta = torch.empty(m, m, device="meta")
    matmul = throughput(f"{m} x {m} @ {m} x {m}", lambda: a @ b, lambda: meta @ meta, 2)
    rows, convolutions = (16 if quick else 128), []
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # the fastest algorithm cuDNN finds for each shape
    try:
        for c, size in CONV_SHAPES:
            layers = [
                torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(d) for d in ("cuda:0", "meta")
            ]
            x = [torch.randn(rows, c, size, size, device=d) for d in ("cuda:0", "meta")]
            shape = f"{rows} x {c} x {size} x {size}, {c} filters of 3 x 3"
            with torch.no_grad():
                run, count = (lambda k=k, f=layers, i=x: f[k](i[k]) for k in (0, 1))
                convolutions.append(throughput(shape, run, count, 5))
    finally:
        torch.backends.cudnn.benchmark = benchmark
    settings = {
        "dtype": "float32",
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.benchmark (for the convolutions)": True,
    }
    best = max(convolutions, key=lambda op: op["tflop_s"])
    return {"settings": settings, "matmul": matmul, "conv": best, "convolutions": convolutions}


def replicate_copies(n: int) -> dict[str, Any]:
    """The replicate exercise's measurement: the replicate chapter's MLP parameters (flat, on
    cuda:0) copied to every other GPU one after another, as replicate's copies go without
    NCCL, and the same tensors through ``broadcast_coalesced`` (NCCL's broadcast)."""
    from experiments.floor_counts import nbytes
    from learn_parallel.lab.measurement import mlp

    params = [p.detach() for p in mlp(1024, 4, torch.device("cuda:0")).parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    ids = list(range(n))
    one_by_one = event_samples(lambda: [flat.to(f"cuda:{d}") for d in ids[1:]], ids, inner=5)
    coalesced = event_samples(
        lambda: torch.cuda.comm.broadcast_coalesced(params, ids), ids, inner=5
    )
    return {
        "bytes": nbytes(params),
        "devices": n,
        "one_after_another_ms": one_by_one,
        "broadcast_coalesced_ms": coalesced,
    }


def record(quick: bool = False, command: str = "") -> dict[str, Any]:
    """Every measurement of this module, on every visible GPU (two or more)."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        raise SystemExit(
            f"experiments.floors needs two or more CUDA GPUs (copies between GPUs, NCCL); this "
            f"machine has {n}. Run it on the GPU host that recorded the chapters."
        )
    sizes = [2**k for k in range(10, 23 if quick else 29, 2)]  # 1 KiB .. 256 MiB (quick: 4 MiB)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "schema": "learn_parallel.floors/1",
        "command": command,
        "hardware": describe_hardware().to_dict(),
        "timing": TIMING,
        "copies": copies(n, (16 if quick else 256) * MiB),
        "collectives": collectives(n, sizes),
        "compute": compute(quick),
        "replicate_copies": replicate_copies(n),
        "counts": all_counts(n),
    }
    report["duration_s"] = round(time.perf_counter() - started, 1)
    return report


def summary(report: dict[str, Any]) -> str:
    """A few lines for the log: the slowest pair, host links, largest collectives, throughputs."""
    c = report["copies"]
    pairs = [
        (v, s, t) for s, row in enumerate(c["pairs_gb_s"]) for t, v in enumerate(row) if s != t
    ]
    lines = [f"GPU to GPU: {min(pairs)[0]:.0f}-{max(pairs)[0]:.0f} GB/s over {len(pairs)} pairs"]
    lines.append(
        f"host to GPU {min(c['h2d_gb_s']):.1f} GB/s, GPU to host {min(c['d2h_gb_s']):.1f} GB/s"
        " (the slowest GPU, pinned host memory)"
    )
    for kind in BUS_FACTOR:
        top = report["collectives"][kind][-1]
        lines.append(
            f"{kind} {top['bytes'] / MiB:.0f} MiB: bus bandwidth {top['busbw_gb_s']:.0f} GB/s"
        )
    for name in ("matmul", "conv"):
        op = report["compute"][name]
        lines.append(f"{name} {op['operation']}: {op['tflop_s']:.1f} TFLOP/s")
    return "\n".join(lines + [f"{report['duration_s']} s"])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.floors", __doc__, "floors.json")
    parser.add_argument("--quick", action="store_true", help="small buffers and sizes (a test)")
    args = parser.parse_args(argv)
    report = record(args.quick, shlex.join(["python", "-m", "experiments.floors", *argv]))
    print(summary(report))
    write_record(args.out, "floors.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
