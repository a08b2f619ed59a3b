"""A chapter's measurement plotted: this machine's panel beside the recorded one.

Kept apart from `plots` (timelines and benchmark results), which imports `plot_measurement`
from here so the chapters' imports stay as they are.
"""

from __future__ import annotations

import textwrap
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from learn_parallel.lab.measurement import Measurement


def plot_measurement(live: Measurement, recorded: Measurement | None = None) -> Figure:
    """A chapter's measurement on this machine, and beside it the same one recorded on GPUs,
    each titled with its hardware; no shared y axis: host-clock and GPU timings differ by
    orders of magnitude."""
    panels = [m for m in (live, recorded) if m is not None]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 3.4), layout="constrained", squeeze=False
    )
    same_title = all(m.title == live.title for m in panels)
    for ax, m, where in zip(axes[0], panels, ("this machine", "recorded")):
        _draw_measurement(ax, m)
        # A different problem size per panel: each title over its own panel, wrapped (the
        # sizes after a colon on a line of their own) so that two long titles do not overlap.
        wrapped = ":\n".join(textwrap.fill(part, 60) for part in m.title.split(": ", 1))
        what = "" if same_title else f"{wrapped}\n"
        ax.set_title(f"{what}{where}: {m.hardware}", fontsize=9)
    if same_title:
        fig.suptitle(live.title, fontsize=10)
    return fig


def _draw_measurement(ax: Any, m: Measurement) -> None:
    names = list(m.series)
    if m.numeric_x:
        xs = [float(v) for v in m.x]
        for k, name in enumerate(names):
            ax.plot(xs, m.series[name], marker="o", color=f"C{k}", label=name)
        if min(xs) > 0 and max(xs) / min(xs) > 20:  # counts over decades: even spacing
            ax.set_xscale("log")
        ax.set_xticks(xs, m.x)
    else:
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            xs = [i - 0.4 + width * (k + 0.5) for i in range(len(m.x))]
            ax.bar(xs, m.series[name], width, color=f"C{k}", label=name)
        ax.set_xticks(range(len(m.x)), m.x, rotation=30 if len(m.x) > 5 else 0)
    ax.set_xlabel(m.xlabel)
    ax.set_ylabel(m.ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    if len(names) > 1:
        ax.legend(fontsize=8)
