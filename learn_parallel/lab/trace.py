"""torch.profiler, the lab's one way in: Chrome/Perfetto traces, and the rule it imposes.

``with chrome_trace("trace.json"): step()``. While ``torch.profiler`` runs, every phase the
core marks (`learn_parallel.phases`) is also a ``record_function`` range named
``learn_parallel.<phase>``, so the trace shows scatter, replicate, each replica's forward,
gather, and backward's parts over torch's own ops, CUDA runtime calls and (on GPUs)
kernels. Open the file at https://ui.perfetto.dev (or chrome://tracing).
Once a profiler has run, CUPTI can stay loaded and tax later CUDA calls unevenly, so the
lab's timers call `refuse_after_profiler`: nothing is timed in a process that profiled,
except the profiled work itself while a profiler runs (`kernels.ProfiledPass` profiles
after every timed round; `traced_steps` runs in a process of its own).
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler
from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import resolve_devices

_profiled = False  # whether this process has made a profiler (`profiler`)
_measuring_the_tax = False  # `measuring_the_tax`: the one experiment that times after one


class ProfiledProcessError(RuntimeError):
    """A timing asked for in a process where torch.profiler has already run."""


def profiler(cuda: bool | None = None) -> profile:
    """A profiler of every thread: CPU activity, plus CUDA's if ``cuda`` (default: a GPU is seen).

    torch.profiler is thread-local: without ``profile_all_threads`` the CPU ops and phase
    ranges of the worker threads that run the replicas' forwards are missing.
    """
    global _profiled
    _profiled = True
    if cuda is None:
        cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    try:
        every_thread = _ExperimentalConfig(profile_all_threads=True)
    except TypeError:  # an older torch: only the profiling thread (and autograd's) are seen
        every_thread = None
    return profile(activities=activities, experimental_config=every_thread)


def has_profiled() -> bool:
    return _profiled


def refuse_after_profiler(what: str) -> None:
    """Raise `ProfiledProcessError` if a profiler has run in this process and none runs now."""
    running = getattr(autograd_profiler, "_is_profiler_enabled", False)
    if _profiled and not running and not _measuring_the_tax:
        raise ProfiledProcessError(
            f"{what} refused: this lab's profiler (learn_parallel.lab.trace.profiler) has already "
            "run in this process, and CUPTI can stay loaded after it and tax later CUDA calls "
            "unevenly. Time first and profile after "
            "every timed round (learn_parallel.lab.kernels.ProfiledPass), or profile in a "
            "process of its own (learn_parallel.lab.processes.run_ranks)."
        )


@contextmanager
def measuring_the_tax() -> Iterator[None]:
    """Time after a profiler on purpose: only to measure what it costs later steps
    (``experiments.profiler_tax``, beside a process that never profiled)."""
    global _measuring_the_tax
    _measuring_the_tax = True
    try:
        yield
    finally:
        _measuring_the_tax = False


@contextmanager
def chrome_trace(path: str | Path) -> Iterator[Any]:
    """Profile the body (CPU, and CUDA where there is a GPU); write the trace to ``path``."""
    path = Path(path)
    prof = profiler()
    with quiet_stderr():
        prof.start()
    try:
        yield prof
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the kernels of the last step belong in the trace
    finally:
        with quiet_stderr():
            prof.stop()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


def traced_steps(rank: int, world: int, path: str, device_ids: list[int]) -> list[str]:
    """Two forward and backward passes of a small DataParallel (no loss phase, no optimizer)
    traced to ``path``; the package's range
    names in it. Run by `processes.run_ranks` (``rank``, ``world``: its calling convention),
    so this process's later timings stay free of the profiler."""
    source = resolve_devices(device_ids)[0].torch_device
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    traced = DataParallel(model.to(source), device_ids)
    batch = torch.randn(64, 64, device=source)
    with chrome_trace(path):
        for _ in range(2):
            traced(batch).sum().backward()
    events = json.loads(Path(path).read_text())["traceEvents"]
    return sorted({e["name"] for e in events if e.get("name", "").startswith("learn_parallel")})


def trace_summary(path: str | Path) -> list[str]:
    """Lines on a Chrome trace (``.json`` or ``.json.gz``): each DataParallel range, how often
    it occurs and its median length on the host; how many kernels each GPU ran."""
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as file:
        events = json.load(file)["traceEvents"]
    ranges: dict[str, list[float]] = defaultdict(list)
    kernels: Counter[int] = Counter()
    for e in events:
        name = e.get("name", "")
        ours = "DataParallel" in name or "learn_parallel" in name  # torch's range, or the package's
        if e.get("cat") == "user_annotation" and ours:
            ranges[name].append(e.get("dur", 0) / 1e3)
        elif e.get("cat") == "kernel":
            kernels[e.get("args", {}).get("device", -1)] += 1
    lines = [
        f"{n}: {len(ms)} x, median {statistics.median(ms):.2f} ms"
        for n, ms in sorted(ranges.items())
    ]
    gpus = ", ".join(f"cuda:{d} {n}" for d, n in sorted(kernels.items()))
    return [*lines, f"kernels per GPU: {gpus or 'none'}"]


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """Drop what C++ writes to the process's stderr meanwhile (Kineto's start/stop lines)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
