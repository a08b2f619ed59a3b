"""Export a Chrome/Perfetto trace of a few steps: the phases as named ranges beside torch's ops.

``with chrome_trace("trace.json"): step()``. While ``torch.profiler`` runs, every phase the
core marks (`learn_parallel.phases`) is also a ``record_function`` range named
``learn_parallel.<phase>``, so the trace shows scatter, replicate, each replica's forward,
gather, and backward's parts over torch's own ops, CUDA runtime calls and (on GPUs)
kernels. Open the file at https://ui.perfetto.dev (or chrome://tracing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile


def profiler(cuda: bool | None = None) -> profile:
    """A profiler of every thread: CPU activity, plus CUDA's if ``cuda`` (default: a GPU is seen).

    torch.profiler is thread-local: without ``profile_all_threads`` the CPU ops and phase
    ranges of the worker threads that run the replicas' forwards are missing.
    """
    if cuda is None:
        cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    try:
        every_thread = _ExperimentalConfig(profile_all_threads=True)
    except TypeError:  # an older torch: only the profiling thread (and autograd's) are seen
        every_thread = None
    return profile(activities=activities, experimental_config=every_thread)


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
