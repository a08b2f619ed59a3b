"""What a timing run recorded, as plain data: each phase on each device in each step.

`timing.Recorder` makes a `Timeline`; the plots, the floors and the recordings read it (a
recording's JSON back through ``Timeline.from_dict``). `Hardware` says what made the numbers
and which clock timed them; `replica_backward` derives each device's own backward from the
bars around it, `step_spans` gives the numbers that say whether a timeline is
self-consistent, and `bars` each phase's longest bar in one step.
"""

from __future__ import annotations

import os
import platform
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from learn_parallel.devices import Device, device_count, device_type

HOST = "host"  # the row for what the Python thread did (phases of no single device)
PHASES = (
    "scatter",
    "replicate",
    "forward",
    "gather",
    "loss",
    "backward",
    "grad scatter",  # backward of gather: the output's gradient split back to the devices
    "replica backward",  # derived: from a device's gradient arriving to its reduce
    "reduce",  # backward of replicate: the replicas' gradients summed onto the source
    "optimizer",
)


@dataclass
class PhaseRecord:
    """One phase on one device in one step; times in ms since recording began."""

    device: str  # "cuda:0", "sim:1" or "host"
    phase: str
    start_ms: float
    end_ms: float
    step: int
    gpu_ms: float | None = None  # the device's kernels and copies inside the bar (lab.kernels)

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


@dataclass
class Hardware:
    """What made the numbers: the one description every plot title and recording carries."""

    device_type: str  # "cuda" or "sim"
    device_count: int
    device_names: list[str]
    torch_version: str
    cuda_version: str | None = None
    python_version: str = field(default_factory=platform.python_version)
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    cpu: str = field(default_factory=lambda: platform.processor() or platform.machine())

    @property
    def clock(self) -> str:
        """What timed the per-device numbers: CUDA events on GPUs, the host clock otherwise."""
        return "CUDA events" if self.device_type == "cuda" else "host clock"

    def label(self, count: int | None = None, clock: bool | str = False) -> str:
        """``"4 x NVIDIA H200"``, ``"4 simulated CPU devices"``, ``"2 CPU processes on 2 cores"``
        (gloo ranks); ``count`` overrides N; ``clock=True`` adds ``" (CUDA events)"``, a string
        adds that text."""
        n = self.device_count if count is None else count
        if self.device_type == "cuda":
            names = sorted(set(self.device_names[:n])) or ["GPU"]
            text = f"{n} x {names[0]}" if len(names) == 1 else " + ".join(self.device_names[:n])
        elif self.device_type == "cpu":
            text = f"{n} CPU process{'es' if n != 1 else ''} on {self.cpu_count} cores"
        else:
            text = f"{n} simulated CPU device{'s' if n != 1 else ''}"
        said = self.clock if clock is True else clock
        return f"{text} ({said})" if said else text

    def to_dict(self) -> dict[str, Any]:
        """The fields, plus the label and whether the devices were simulated (for readers)."""
        return asdict(self) | {"label": self.label(), "simulated": self.device_type != "cuda"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hardware:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def describe_hardware(devices: Sequence[Device] | None = None) -> Hardware:
    """The hardware of ``devices`` (default: every device DataParallel could use here)."""
    kind = device_type()
    indices = list(range(device_count())) if devices is None else [d.index for d in devices]
    gpu = torch.cuda.get_device_name
    names = [gpu(i) if kind == "cuda" else "simulated CPU device" for i in indices]
    return Hardware(kind, len(indices), names, torch.__version__, torch.version.cuda)


@dataclass
class Timeline:
    """What a recorder captured: records plus the hardware and the clock of each row."""

    hardware: Hardware
    records: list[PhaseRecord]
    clocks: dict[str, str]  # row -> "cuda-event" or "host"
    origin_s: float = 0.0  # time.perf_counter() at 0 ms
    # Per GPU row, how far (µs) the profiled pass's second clock anchor landed from where its
    # first one put it (`kernels.ProfiledPass`): the error that ``gpu_ms`` may carry.
    anchor_drift_us: dict[str, float] = field(default_factory=dict)

    def devices(self) -> list[str]:
        """Rows in display order: the host row first, then devices by index."""

        def key(row: str) -> tuple[bool, str, int]:
            kind, _, index = row.partition(":")
            return (row != HOST, kind, int(index) if index.isdigit() else 0)

        return sorted({r.device for r in self.records}, key=key)

    def steps(self) -> list[int]:
        return sorted({r.step for r in self.records})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timeline:
        return cls(
            hardware=Hardware.from_dict(data["hardware"]),
            records=[PhaseRecord(**r) for r in data["records"]],
            clocks=dict(data["clocks"]),
            origin_s=data.get("origin_s", 0.0),
            anchor_drift_us=data.get("anchor_drift_us", {}),
        )


def replica_backward(records: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """Per device and step: from the end of its last ``grad scatter`` to its first ``reduce``."""
    ends: dict[tuple[str, int], float] = {}
    starts: dict[tuple[str, int], float] = {}
    for r in records:
        key = (r.device, r.step)
        if r.phase == "grad scatter":
            ends[key] = max(ends.get(key, r.end_ms), r.end_ms)
        elif r.phase == "reduce":
            starts[key] = min(starts.get(key, r.start_ms), r.start_ms)
    keys = [k for k in sorted(ends.keys() & starts.keys()) if k[0] != HOST and starts[k] >= ends[k]]
    return [PhaseRecord(d, "replica backward", ends[d, s], starts[d, s], s) for d, s in keys]


def own_ms(bar: PhaseRecord, records: Sequence[PhaseRecord]) -> float:
    """The part of ``bar`` outside the shorter bars nested in it on its row in its step
    (backward holds grad scatter, replica backward and reduce): each moment counted once."""
    row = [r for r in records if (r.device, r.step) == (bar.device, bar.step)]
    inside = sorted(
        (r.start_ms, r.end_ms)
        for r in row
        if r.duration_ms < bar.duration_ms and bar.start_ms <= r.start_ms <= r.end_ms <= bar.end_ms
    )
    covered, reached = 0.0, bar.start_ms
    for start, end in inside:
        covered += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return bar.duration_ms - covered


def phase_totals(
    timeline: Timeline, steps: Sequence[int] | None = None, own: bool = False
) -> dict[str, dict]:
    """Mean milliseconds per step spent in each phase, per row: ``{row: {phase: ms}}``. With
    ``own``, a bar counts only its time outside the bars nested in it (`own_ms`)."""
    steps = timeline.steps() if steps is None else list(steps)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in timeline.records:
        if r.step in steps:
            ms = own_ms(r, timeline.records) if own else r.duration_ms
            totals[r.device][r.phase] += ms / len(steps)
    return {row: dict(by_phase) for row, by_phase in totals.items()}


def step_spans(timeline: Timeline) -> list[dict[str, Any]]:
    """Per step, the raw numbers that say whether a timeline is self-consistent (ms).

    ``span``: first start to last end over every row; ``device_span``: the same over the
    device rows; ``device_lag``: from the host row's start to the first device row's;
    ``previous_device_end``: when the devices finished the step before (a lag with
    ``first_device_start`` near it means the host ran ahead of busy devices)."""
    rows = []
    previous_end = None
    for step in timeline.steps():
        recs = [r for r in timeline.records if r.step == step]
        dev = [r for r in recs if r.device != HOST]
        host = [r for r in recs if r.device == HOST]
        row: dict[str, Any] = {
            "step": step,
            "span": max(r.end_ms for r in recs) - min(r.start_ms for r in recs),
        }
        if dev:
            first, last = min(r.start_ms for r in dev), max(r.end_ms for r in dev)
            row.update(device_span=last - first, first_device_start=first, last_device_end=last)
            row["previous_device_end"] = previous_end
            previous_end = last
        if host:
            row["host_start"] = min(r.start_ms for r in host)
            if dev:
                row["device_lag"] = row["first_device_start"] - row["host_start"]
        rows.append(row)
    return rows


def bars(timeline: Timeline, step: int | None = None) -> dict[str, tuple[str, float, float | None]]:
    """Per phase: the GPU row with the longest bar in ``step`` (default: the last), the bar
    (its bars summed, where a row has several) and the GPU work inside it."""
    step = timeline.steps()[-1] if step is None else step
    found: dict[str, tuple[str, float, float | None]] = {}
    for row in timeline.devices():
        mine = [r for r in timeline.records if r.device == row and r.step == step]
        for name in dict.fromkeys(r.phase for r in mine):
            parts = [r for r in mine if r.phase == name]
            bar = sum(r.duration_ms for r in parts)
            gpu = None if any(r.gpu_ms is None for r in parts) else sum(r.gpu_ms for r in parts)
            if row != "host" and bar > found.get(name, ("", -1.0, None))[1]:
                found[name] = (row, bar, gpu)
    return found
