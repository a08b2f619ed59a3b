"""The per-device measurements the chapters plot, live and recorded: one function per chapter.

Each chapter times its piece of DataParallel on the reader's devices (GPUs or simulated)
beside the same function run on H200s; `load_recorded` reads those recorded runs back.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from learn_parallel import sim
from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike, resolve_device_ids, synchronize
from learn_parallel.lab import records
from learn_parallel.lab.kernels import with_gpu_times
from learn_parallel.lab.persistent_workers import run_fresh_threads
from learn_parallel.lab.steps import make_step, one_device
from learn_parallel.lab.timing import Hardware, Recorder, Timeline, describe_hardware, step_times_ms
from learn_parallel.lab.workloads import SIZES
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import check_on_source_device, copy_to_devices, replicate
from learn_parallel.scatter_gather import gather, scatter
from learn_parallel.variants.tuple_parallel import TupleParallel, split_batch


@dataclass
class Measurement:
    """One chapter's numbers: a value per x position for each named series."""

    key: str
    title: str  # what was measured; the plot adds the hardware
    xlabel: str
    ylabel: str  # with its unit
    x: list[str]  # device names, or sizes/counts when ``numeric_x``
    series: dict[str, list[float]]  # series name -> one value per x position
    hardware: str  # "4 x NVIDIA H200 (CUDA events)", "4 simulated CPU devices (host clock)"
    numeric_x: bool = False  # draw lines over numbers instead of bars over names
    note: str = ""
    # Interleaved rounds, where a verdict needs them: series -> per x position, each round's value.
    repeats: dict[str, list[list[float]]] = field(default_factory=dict)


# [median-ms]
def median_ms(fn: Callable[[], Any], device: Device, repeats: int = 15) -> float:
    """Median time of ``fn()`` in milliseconds, measured on ``device``.

    On a GPU the clock is a pair of CUDA events on that GPU's current stream: from the moment
    the stream reaches the first to the moment it reaches the second, so it includes the GPU
    waiting for Python to launch the next kernel (a call that queues no GPU work still takes
    microseconds). On a simulated device it is the host clock. One untimed warm-up call first.
    """
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device.index)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


# [median-ms]


def wall_ms(fn: Callable[[], Any], devices: Sequence[Device], repeats: int = 15) -> float:
    """Median wall time of ``fn()`` in ms, with every device idle before and after."""
    return statistics.median(step_times_ms(fn, devices, warmup=1, steps=repeats))


def _devices(devices: Sequence[DeviceLike] | None) -> list[Device]:
    return resolve_device_ids(None if devices is None else list(devices))


def _mlp(width: int, layers: int, source: torch.device) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(source)


def matmul(devices: Sequence[DeviceLike] | None = None, n: int = 384) -> Measurement:
    """Devices chapter: the same n x n matmul timed on each device in turn."""
    devs = _devices(devices)
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
        describe_hardware(devs).label(clock=True),
    )


def source_check(
    devices: Sequence[DeviceLike] | None = None, layer_counts: Sequence[int] = (1, 4, 16, 64, 128)
) -> Measurement:
    """Source-device chapter: host time of the forward check against the module's size."""
    devs = _devices(devices)
    source = devs[0]
    counts, times = [], []
    for layers in layer_counts:
        net = _mlp(8, layers, source.torch_device)
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
        # Timed by the host clock on a GPU machine too: the check never waits for a GPU.
        f"{describe_hardware(devs).label()} (host clock)",
        numeric_x=True,
    )


def scatter_copy(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Scatter chapter: moving each device's slice of a rows x 1024 batch to that device."""
    devs = _devices(devices)
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
        describe_hardware(devs).label(clock=True),
    )


def replicate_copy(devices: Sequence[DeviceLike] | None = None, width: int = 1024) -> Measurement:
    """Replicate chapter: copying a 4-layer MLP's parameters from the source to each device."""
    devs = _devices(devices)
    params = list(_mlp(width, 4, devs[0].torch_device).parameters())
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
        describe_hardware(devs).label(clock=True),
        note="Replica 0 keeps the original tensors; broadcast_coalesced still flattens them "
        "into buffers of about 10 MB on the source first (simulated devices too), a real copy.",
    )


def replica_forward(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Introduction: how long each replica's forward pass takes inside DataParallel."""
    devs = _devices(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(source)
    wrapped = DataParallel(net, [d.index for d in devs])
    batch = torch.randn(rows, 256, device=source)
    with torch.no_grad(), Recorder(devices=devs) as rec:
        for _ in rec.steps(6):
            wrapped(batch)
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
        describe_hardware(devs).label(clock=True),
    )


def gather_targets(devices: Sequence[DeviceLike] | None = None, rows: int = 4096) -> Measurement:
    """Gather chapter: joining the same pieces onto each device in turn, and onto the host."""
    devs = _devices(devices)
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
        describe_hardware(devs).label(clock=True),
    )


def parallel_apply_timeline(devices: Sequence[DeviceLike] | None = None) -> Timeline:
    """Parallel-apply chapter: each replica's forward pass, three steps, one row per device."""
    devs = _devices(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to(source)
    ids = [d.index for d in devs]
    pieces = scatter(torch.randn(4096, 256, device=source), ids)
    replicas = replicate(net, ids, detach=True)

    def record() -> Timeline:
        with Recorder(devices=devs) as rec:
            for _ in rec.steps(3):
                parallel_apply(replicas, pieces)
        return rec.timeline()

    with torch.no_grad():
        parallel_apply(replicas, pieces)  # warm up: first kernels, worker threads
        return with_gpu_times(record)


def training_timeline(devices: Sequence[DeviceLike] | None = None) -> Timeline:
    """DataParallel chapter: every phase of a training step, on every device."""
    devs = _devices(devices)
    source = devs[0].torch_device
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).to(source)
    wrapped = DataParallel(net, [d.index for d in devs])
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    x, y = torch.randn(4096, 512, device=source), torch.randn(4096, 512, device=source)

    def record() -> Timeline:
        with Recorder(devices=devs) as rec:
            for _ in rec.steps(4):  # the plots show the last step; the first warms up
                out = wrapped(x)
                # The loss and the optimizer step run on the first device only (the output
                # is gathered there and the parameters live there); backward runs everywhere.
                with rec.phase("loss", devs[0]):
                    loss = nn.functional.mse_loss(out, y)
                with rec.phase("backward"):
                    loss.backward()
                with rec.phase("optimizer", devs[0]):
                    opt.step()
                    opt.zero_grad()
        return rec.timeline()

    return with_gpu_times(record)


def wrapper_scaling(devices: Sequence[DeviceLike] | None = None) -> list[dict[str, Any]]:
    """Performance chapter: one training step of the small MLP with no wrapper, ours and
    torch's DataParallel on 1, 2 and 4 devices; rows as in a recorded ``bench.json``."""
    devs = _devices(devices)
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
    return rows


def _counts(devs: Sequence[Device]) -> list[int]:
    """Device counts to sweep: 1, 2, 4, 8, ... and always all of them."""
    counts = [n for n in (1, 2, 4, 8, 16) if n < len(devs)]
    return [*counts, len(devs)]


def _time_both_wrappers(
    devs: Sequence[Device], rows: int, width: int, rounds: int = 5
) -> tuple[list[float], list[float]]:
    """Each wrapper's median step time in each of ``rounds`` rounds, the two interleaved."""
    n, source = len(devs), devs[0].torch_device
    ids = [d.index for d in devs]
    x, y = torch.randn(rows, width, device=source), torch.randn(rows, width, device=source)
    net = _mlp(width, 3, source)
    dp, tp = DataParallel(net, ids), TupleParallel(net, ids)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    # TupleParallel's batches arrive already split, as from PerDeviceCollate.
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


def tuple_vs_data_parallel(
    devices: Sequence[DeviceLike] | None = None, rows: int = 4096, width: int = 512
) -> Measurement:
    """TupleParallel chapter: one training step, one batch split inside vs N batches given;
    five interleaved rounds per device count (``repeats``), the median of them plotted."""
    devs = _devices(devices)
    counts = _counts(devs)
    repeats: dict[str, list[list[float]]] = {"DataParallel": [], "TupleParallel": []}
    for n in counts:
        dp_rounds, tp_rounds = _time_both_wrappers(devs[:n], rows, width)
        repeats["DataParallel"].append(dp_rounds)
        repeats["TupleParallel"].append(tp_rounds)
    series = {name: [statistics.median(r) for r in per_x] for name, per_x in repeats.items()}
    return Measurement(
        "tuple_vs_data_parallel",
        f"One training step of a 3-layer MLP, {rows} rows of {width} features",
        "devices",
        "median step time (ms)",
        [str(n) for n in counts],
        series,
        describe_hardware(devs).label(clock="host clock around whole steps"),
        numeric_x=True,
        repeats=repeats,
    )


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
    devs = _devices(devices)
    on_gpus = devs[0].type == "cuda"
    rows = rows or (8192 if on_gpus else 4096)
    classes = classes or (32000 if on_gpus else 2000)
    width = width or (1024 if on_gpus else 128)
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

    def dp_step() -> None:
        nn.functional.cross_entropy(dp(x), y).backward()

    def tp_step() -> None:
        outs = tp(list(xs))
        losses = [
            nn.functional.cross_entropy(o, t, reduction="sum").to(source) for o, t in zip(outs, ys)
        ]
        (sum(losses) / rows).backward()

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
    reader = "torch.cuda.max_memory_allocated" if on_gpus else "bytes of live tensors"
    return Measurement(
        "peak_memory",
        f"Extra memory at the peak of one step: {rows} rows, {classes} logits each"
        + ("" if width == 1024 else f" (from {width} features)"),
        "device",
        "peak memory above the model (MiB)",
        [str(d) for d in devs],
        series,
        describe_hardware(devs).label(clock=reader),
    )


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


def worker_overhead(devices: Sequence[DeviceLike] | None = None) -> Measurement:
    """Performance chapter: one parallel_apply call on replicas that do almost nothing, so
    what is timed is the machinery: persistent workers vs a thread started per replica (and,
    on GPUs, torch.nn.parallel.parallel_apply, which does the latter)."""
    devs = _devices(devices)
    counts = _counts(devs)
    series: dict[str, list[float]] = {"persistent workers (learn_parallel)": []}
    series["a new thread per replica per call"] = []
    if devs[0].type == "cuda":
        series["torch.nn.parallel.parallel_apply"] = []
    for n in counts:
        for name, ms in zip(series, _time_apply_calls(devs[:n])):
            series[name].append(1e3 * ms)
    return Measurement(
        "worker_overhead",
        "One parallel_apply call on tiny replicas (Linear(8, 8), 2 rows each)",
        "devices",
        "median time per call (µs)",
        [str(n) for n in counts],
        series,
        describe_hardware(devs).label(clock=True),
        numeric_x=True,
    )


def chain(devices: Sequence[DeviceLike] | None = None, config: Any = None) -> Measurement:
    """Options chapter: the two-network chain of chain_bench, kept scattered vs regathered."""
    from learn_parallel.lab import chain_bench

    devs = _devices(devices)
    config = config or chain_bench.Config(
        batch=64, image_size=32, features=32, classes=10, warmup=2, steps=7
    )
    results = [chain_bench.measure(n, config) for n in _counts(devs) if n >= 2]
    label = describe_hardware(devs).label(clock=CHAIN_CLOCK[devs[0].type == "cuda"])
    return chain_measurement(results, label, config.feature_map_mb)


# chain_bench times whole steps on the host clock, with every device synchronized around each.
CHAIN_CLOCK = {True: "host clock, GPUs synchronized", False: "host clock"}


def chain_measurement(results: Sequence[dict], label: str, feature_map_mb: float) -> Measurement:
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
        label,
        numeric_x=True,
    )


@dataclass
class Recorded:
    """A GPU machine's recorded runs, as shipped under ``learn_parallel/lab/recorded/<machine>``."""

    machine: str
    hardware: str
    measurements: dict[str, Measurement]
    timelines: dict[str, Timeline]
    bench: dict[str, Any] | None = None  # the benchmark's bench.json
    chain_bench: dict[str, Any] | None = None
    date: str = ""
    source: str = ""  # the folder it was read from
    # A second run of every measurement made right after the first (chapters-repeat.json),
    # to show how much host-side timings move between runs; empty when not recorded.
    repeat: dict[str, Measurement] = field(default_factory=dict)

    def measurement(self, key: str) -> Measurement:
        if key not in self.measurements:
            raise KeyError(
                f"The recording from {self.machine} has no measurement {key!r} (it has "
                f"{sorted(self.measurements)}); record it again with book/data/record_gpu_runs.sh."
            )
        return self.measurements[key]

    def timeline(self, key: str) -> Timeline:
        if key not in self.timelines:
            raise KeyError(f"The recording from {self.machine} has no timeline {key!r}.")
        return self.timelines[key]

    def bench_results(self, group: str) -> list[dict[str, Any]]:
        """The benchmark's result rows of one workload group (e.g. ``"mlp"``)."""
        rows = [r for r in (self.bench or {}).get("results", []) if r["group"] == group]
        if not rows:
            raise KeyError(f"No benchmark results for {group!r} in the {self.machine} recording.")
        return rows

    def bench_timeline(self, group: str, implementation: str, devices: int) -> Timeline:
        for t in (self.bench or {}).get("timelines", []):
            if (t["group"], t["implementation"], t["devices"]) == (group, implementation, devices):
                return Timeline.from_dict(t["timeline"])
        raise KeyError(f"No {implementation} timeline for {group!r} on {devices} devices.")


def load_recorded(machine: str = "h200-x4") -> Recorded:
    """The runs recorded on ``machine`` (a folder name under `records.recorded_root`)."""
    folder = records.recorded_root() / machine
    chapters = records.read_json("chapters.json", machine)
    bench = records.read_json("bench.json", machine)
    if chapters is None and bench is None:
        raise FileNotFoundError(
            f"No recorded runs for {machine!r}: {folder} holds neither chapters.json nor "
            f"bench.json. The recorded runs ship inside the package (learn_parallel/lab/"
            f"recorded): reinstall it, or set LEARN_PARALLEL_DATA to a folder that holds "
            f"{machine}/ (the layout book/data/record_gpu_runs.sh writes)."
        )
    chapters = chapters or {"measurements": {}, "timelines": {}}
    meta = (bench or {}).get("meta", {})
    hardware = chapters.get("hardware") or Hardware.from_dict(meta["hardware"]).label(clock=True)
    measurements = {k: Measurement(**v) for k, v in chapters["measurements"].items()}
    chain = records.read_json("chain_bench.json", machine)
    if chain and "chain" not in measurements:  # recorded by its own driver, in its own file
        on_gpus = not chain["hardware"].get("simulated", False)
        label = f"{hardware.split(' (')[0]} ({CHAIN_CLOCK[on_gpus]})"
        measurements["chain"] = chain_measurement(
            chain["results"], label, chain["config"]["feature_map_mb"]
        )
    repeat = records.read_json("chapters-repeat.json", machine) or {"measurements": {}}
    return Recorded(
        machine=machine,
        hardware=hardware,
        measurements=measurements,
        timelines={k: Timeline.from_dict(v) for k, v in chapters["timelines"].items()},
        bench=bench,
        chain_bench=chain,
        date=chapters.get("date") or meta.get("date", ""),
        source=str(folder),
        repeat={k: Measurement(**v) for k, v in repeat["measurements"].items()},
    )
