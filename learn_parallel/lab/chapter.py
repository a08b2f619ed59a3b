"""The setup every chapter shares: this machine's device plan, the recorded GPU runs, plots.

A chapter's first cell installs the package where it is missing (Colab) and then runs
``from learn_parallel.lab.chapter import *``, which brings in the names below. The device
plan is decided here, once, for every machine a learner may have:

- two or more GPUs: the lessons run on them (``cuda:0``, ``cuda:1``, ...);
- one GPU or none: the multi-device lessons run on simulated devices (``sim:0``, ...,
  four unless ``LEARN_PARALLEL_SIMULATED_DEVICES`` says otherwise, and never fewer than
  two), and a single real
  GPU, where there is one, is ``GPU``: the one-device baselines and the GPU side of a
  copy use it. Cells that need several real GPUs (NCCL, per-GPU CUDA-event timings) ask
  `needs_gpus`, which says why the recorded run is shown instead.

Choosing simulated devices sets ``LEARN_PARALLEL_SIMULATE=1`` in this process
(`learn_parallel.devices.simulate_for_lessons`), so ``lp.DataParallel(model)`` with no
``device_ids`` and the processes a chapter starts use the same devices as the chapter.
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
from learn_parallel.lab import measure
from learn_parallel.lab.notebook import skip_cells_that_use
from learn_parallel.lab.plots import plot_measurement, plot_timeline
from learn_parallel.lab.source import show_source

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
    "show",
    "show_source",
    "show_timelines",
    "time_ms",
    "torch",
]

RECORDED_MACHINE = "h200-x4"  # the chapters' measurements recorded on 4 x H200


@dataclass(frozen=True)
class DevicePlan:
    """Which devices the chapters run on here, and why."""

    kind: str  # "cuda" or "sim"
    devices: list[Device]
    gpus: int  # real GPUs this process sees
    gpu: torch.device | None  # a lone real GPU for one-device lessons, else None
    reason: str  # one line: why these devices

    @property
    def source(self) -> torch.device:
        """Where the model and the batch start out: the first device."""
        return self.devices[0].torch_device

    def summary(self) -> str:
        names = ", ".join(d.describe() for d in self.devices)
        return f"{len(self.devices)} devices: {names}\n{self.reason}"


def plan_devices() -> DevicePlan:
    """Decide the chapters' devices for this machine (see the module's docstring)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reason = simulate_for_lessons(2)
    kind = device_type()
    devices = [Device(kind, i) for i in range(device_count())]
    gpu = None
    if kind == SIMULATED and gpus == 1:
        gpu = torch.device("cuda", 0)
        reason += f" Single-device baselines use GPU = cuda:0 ({torch.cuda.get_device_name(0)})."
    return DevicePlan(kind, devices, gpus, gpu, reason)


def needs_gpus(count: int, what: str) -> bool:
    """True when ``count`` real GPUs are in the plan; otherwise say why the recording is shown.

    For the cells that measure what only real GPUs have (NCCL, CUDA events per GPU).
    """
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
HARDWARE = measure.hardware_label(DEVICES)  # e.g. "4 simulated CPU devices (host clock)"
time_ms = measure.median_ms  # median of 15 runs: CUDA events on a GPU, host clock otherwise

try:  # shipped in learn_parallel/lab/recorded
    RECORDED = measure.load_recorded(RECORDED_MACHINE)
except FileNotFoundError as missing:  # say so once; the cells that need them are skipped
    RECORDED = None
    skip_cells_that_use(["RECORDED"], attributes=["load_recorded"], reason=missing)


def show(live: measure.Measurement) -> None:
    """Plot a measurement taken here, beside the same one recorded on 4 x H200."""
    recorded = RECORDED.measurement(live.key) if RECORDED else None
    plot_measurement(live, recorded)
    plt.show()


def show_timelines(live: measure.Timeline, key: str, title: str) -> None:
    """The last step of a timeline recorded here, above the same one recorded on 4 x H200."""
    panels = [("this machine", live)]
    if RECORDED:
        panels.append(("recorded", RECORDED.timeline(key)))
    rows = sum(len(t.devices()) for _, t in panels)
    fig, _ = plt.subplots(
        len(panels), 1, figsize=(10, 1.4 * len(panels) + 0.45 * rows), layout="constrained"
    )
    for ax, (where, timeline) in zip(fig.axes, panels):
        plot_timeline(timeline, title=f"{where}: {title}", ax=ax)
    plt.show()
