"""The setup every chapter shares: this machine's device plan, the recorded GPU runs, plots.

A chapter's first cell installs the package where it is missing (Colab) and then runs
``from learn_parallel.lab.chapter import *``. Two or more GPUs run the lessons; with one GPU
or none they run on simulated devices (four unless ``LEARN_PARALLEL_SIMULATED_DEVICES`` says
otherwise, never fewer than two), one CPU thread each. The one-device baselines run on the
first device of the plan, a simulated one where it simulates. A lone GPU is ``GPU``: one cell
uses it, to time a copy to it (the devices chapter). Cells that need several real GPUs ask
`needs_gpus`, which says why the recorded run is shown instead. ``LEARN_PARALLEL_SIMULATE=1``
is set when simulating, so the processes a chapter starts use the same devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import (
    SIMULATED,
    Device,
    device_count,
    device_type,
    simulate_for_lessons,
)
from learn_parallel.lab import measure, provenance, records
from learn_parallel.lab.plots import plot_measurement, plot_timeline
from learn_parallel.lab.source import short_tracebacks, show_source
from learn_parallel.lab.steps import one_thread_per_device
from learn_parallel.lab.timeline import describe_hardware

__all__ = [
    "DEVICES",
    "DEVICE_IDS",
    "GPU",
    "HARDWARE",
    "KIND",
    "PLAN",
    "RECORDED",
    "SOURCE",
    "Device",
    "DevicePlan",
    "device_count",
    "device_type",
    "lp",
    "measure",
    "needs_gpus",
    "nn",
    "plan_devices",
    "plot_measurement",
    "plt",
    "recorded_summary",
    "show",
    "show_source",
    "show_timelines",
    "time_ms",
    "torch",
]


@dataclass(frozen=True)
class DevicePlan:
    """Which devices the chapters run on here, and why."""

    kind: str  # "cuda" or "sim"
    devices: list[Device]
    gpus: int  # real GPUs this process sees
    gpu: torch.device | None  # a lone real GPU (times a copy in the devices chapter), else None
    reason: str  # one line: why these devices
    threads: str = ""  # one line: the CPU thread policy, where simulated devices time on the CPU

    @property
    def source(self) -> torch.device:
        """Where the model and the batch start out: the first device."""
        return self.devices[0].torch_device

    def summary(self) -> str:
        names = ", ".join(d.describe() for d in self.devices)
        lines = [f"{len(self.devices)} devices: {names}", self.reason, self.threads]
        return "\n".join(line for line in lines if line)


def plan_devices() -> DevicePlan:
    """Decide the chapters' devices for this machine (see the module's docstring)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reason = simulate_for_lessons(2)
    kind = device_type()
    devices = [Device(kind, i) for i in range(device_count())]
    gpu = None
    if kind == SIMULATED and gpus == 1:
        gpu = torch.device("cuda", 0)
        name = torch.cuda.get_device_name(0)
        reason += f" GPU = cuda:0 ({name}): only the devices chapter uses it, to time a copy to it."
    return DevicePlan(kind, devices, gpus, gpu, reason, one_thread_per_device())


def needs_gpus(count: int, what: str) -> bool:
    """True when ``count`` real GPUs are in the plan (NCCL, CUDA events per GPU); else say
    why the recorded run is shown instead."""
    if PLAN.kind == "cuda" and len(PLAN.devices) >= count:
        return True
    have = f"{PLAN.gpus} GPU" + ("" if PLAN.gpus == 1 else "s")
    print(f"{what} needs {count} GPUs and this machine has {have}: showing the recorded run.")
    return False


PLAN = plan_devices()
KIND = PLAN.kind  # "cuda" on a machine with 2+ GPUs, "sim" (simulated devices) otherwise
DEVICES = PLAN.devices
DEVICE_IDS = [d.index for d in DEVICES]
SOURCE = PLAN.source
GPU = PLAN.gpu
HARDWARE = describe_hardware(DEVICES).label()  # "4 simulated CPU devices"; clocks per result
time_ms = measure.median_ms  # median of 15 runs: CUDA events on a GPU, host clock otherwise
# Shipped in learn_parallel/lab/recorded (the machine with the most GPUs that recorded
# chapters.json): an install without them fails here, saying how to fix it.
RECORDED = measure.load_recorded()
short_tracebacks()  # error demonstrations end in their message, not in pages of torch


def recorded_summary() -> str:
    """One line on the GPU runs the chapters show, and one per recording whose code changed."""
    others = (
        "recordings from other machines, or from a subset of this host's GPUs, name their own"
        " hardware in their titles"
    )
    lines = [f"recorded GPU runs: {RECORDED.hardware}, {RECORDED.date[:10]} ({others})"]
    for name in ("chapters.json", "chapters-repeat.json", "bench.json", "chain_bench.json"):
        record = records.read_json(name, RECORDED.machine)
        if record and (stale := provenance.staleness_line(record)):
            lines.append(f"{name}: {stale}")
    return "\n".join(lines)


def show(live: measure.Measurement) -> None:
    """Plot a measurement taken here, beside the same one recorded on GPUs."""
    plot_measurement(live, RECORDED.measurement(live.key))
    plt.show()


def show_timelines(live: measure.Timeline, key: str, title: str) -> None:
    """The last step of a timeline recorded here, above the same one recorded on GPUs."""
    panels = [("this machine", live), ("recorded", RECORDED.timeline(key))]
    rows = sum(len(t.devices()) for _, t in panels)
    fig, _ = plt.subplots(
        len(panels), 1, figsize=(10, 1.4 * len(panels) + 0.45 * rows), layout="constrained"
    )
    for ax, (where, timeline) in zip(fig.axes, panels):
        plot_timeline(timeline, title=f"{where}: {title}", ax=ax)
    plt.show()
