"""What a benchmark run measures: its `Settings`, filled in for this machine, and its groups.

A `Group` is one workload under one cudnn.benchmark setting: one table, one set of
plots. ``experiments/benchmark.py`` runs them; ``python -m experiments.bench`` is the
command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from learn_parallel.devices import device_count, device_count_error, device_type
from learn_parallel.lab.workloads import SIZES, Workload

IMPLEMENTATIONS = ("single", "learn_parallel", "torch_dp", "replicated", "ddp")


def on_gpus() -> bool:
    """Whether DataParallel runs on GPUs here (not with ``LEARN_PARALLEL_SIMULATE=1``)."""
    return device_type() == "cuda"


@dataclass
class Settings:
    """A resolved benchmark run: what to measure, and how long."""

    workloads: list[Workload]
    devices: list[int]
    implementations: list[str]
    cudnn_modes: list[bool]
    warmup: int
    steps: int
    timeline_steps: int
    lr: float = 0.01
    seed: int = 0
    ddp_timeout: float = 300.0
    notes: list[str] = field(default_factory=list)
    trace: Path | None = None  # Chrome/Perfetto traces: PATH's stem + "-<group>-<impl>-<n>.json"
    gpu_work: bool = True  # the profiled pass after all timing: GPU work inside the bars


def settings(
    quick: bool = False,
    devices: Sequence[int] | None = None,
    workloads: Sequence[str] = ("mlp", "conv"),
    implementations: Sequence[str] = IMPLEMENTATIONS,
    cudnn_benchmark: str | None = None,
    warmup: int | None = None,
    steps: int | None = None,
    timeline_steps: int | None = None,
    sizes: dict[str, dict[str, Any]] | None = None,
    **rest: Any,
) -> Settings:
    """A run with every unset choice filled in for this machine (GPU or CPU) and ``quick``.

    ``sizes`` overrides workload fields, e.g. ``{"mlp": {"batch": 256}}``; ``rest`` sets
    the remaining `Settings` fields (``lr``, ``seed``, ``ddp_timeout``, ``trace``).
    """
    size = "quick" if quick else "gpu" if on_gpus() else "cpu"

    def pick(value: Any, gpu: Any, cpu: Any, quick_value: Any) -> Any:
        return value if value is not None else {"gpu": gpu, "cpu": cpu, "quick": quick_value}[size]

    available = device_count()
    counts = sorted(set(devices or ([1, 2] if quick else [1, 2, 4, 8, 16, available])))
    counts = [n for n in counts if n <= available] if devices is None else counts
    problem = device_count_error(max(counts))
    if problem:
        raise ValueError(problem)
    notes = []
    if "single" in implementations and 1 not in counts:
        notes.append("single is always measured on one device")
    chosen = [
        replace(SIZES[size][kind], **(sizes or {}).get(kind, {})).resolved()
        for kind in ("mlp", "conv")
        if kind in workloads
    ]
    mode = pick(cudnn_benchmark, "both", "off", "both" if on_gpus() else "off")
    return Settings(
        workloads=chosen,
        devices=counts,
        implementations=[i for i in IMPLEMENTATIONS if i in implementations],
        cudnn_modes={"off": [False], "on": [True], "both": [False, True]}[mode],
        warmup=pick(warmup, 5, 2, 2),
        steps=max(1, pick(steps, 20, 5, 5)),
        timeline_steps=pick(timeline_steps, 3, 3, 2),
        notes=notes,
        **rest,
    )


@dataclass(frozen=True)
class Group:
    """One workload under one cudnn.benchmark setting: one table, one set of plots."""

    workload: Workload
    cudnn_benchmark: bool | None  # None: the setting does not matter (MLP, or no GPU)

    @property
    def key(self) -> str:
        if self.cudnn_benchmark is None:
            return self.workload.kind
        return f"{self.workload.kind}-cudnn-benchmark-{'on' if self.cudnn_benchmark else 'off'}"

    def title(self) -> str:
        extra = ""
        if self.cudnn_benchmark is not None:
            extra = f", cudnn.benchmark {'on' if self.cudnn_benchmark else 'off'}"
        return self.workload.describe() + extra


def groups_of(settings: Settings) -> list[Group]:
    groups = []
    for w in settings.workloads:
        if w.kind == "conv" and on_gpus():
            groups += [Group(w, mode) for mode in settings.cudnn_modes]
        else:
            groups.append(Group(w, None))
    return groups
