"""Plots of recorded timelines and benchmark results (matplotlib, safe without a display).

Every function takes plain data (a `Timeline`, or benchmark result rows as they sit in
the JSON file), returns the Figure, and names the hardware that made the numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

# Without a display matplotlib falls back to Agg by itself; notebooks keep inline.
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from learn_parallel.lab.measurement_plots import plot_measurement  # noqa: F401 (imported from here)
from learn_parallel.lab.timeline import HOST, PHASES, Timeline, phase_totals

PHASE_COLORS = {
    "scatter": "#4C72B0",
    "replicate": "#DD8452",
    "forward": "#55A868",
    "gather": "#C44E52",
    "loss": "#8172B3",
    "backward": "#D9CBB8",  # light: the nested backward phases are drawn over it
    "grad scatter": "#64B5CD",
    "replica backward": "#937860",
    "reduce": "#E0A020",
    "optimizer": "#DA8BC3",
    "all-reduce": "#E17C05",  # ReplicatedStep's and DDP's
    "broadcast buffers": "#A0522D",
    "forward+backward graph": "#2E7D32",
    "optimizer graph": "#A0448C",
}
IMPLEMENTATION_LABELS = {
    "single": "one device, no wrapper",
    "learn_parallel": "learn_parallel.DataParallel",
    "torch_dp": "torch.nn.DataParallel",
    "replicated": "ReplicatedStep (one process, CUDA graphs on GPUs)",
    "ddp": "DistributedDataParallel",
}
IMPLEMENTATION_COLORS = {
    "single": "#7F7F7F",
    "learn_parallel": "#2CA02C",
    "torch_dp": "#1F77B4",
    "replicated": "#9467BD",
    "ddp": "#FF7F0E",
}

# Where a benchmark row ran (its "ran_on"), named in the legend when a plot mixes kinds.
RAN_ON_LABELS = {"cuda": "GPUs", "sim": "simulated devices", "cpu": "plain CPU processes, gloo"}
Result = Mapping[str, Any]
LEGEND_RIGHT = {"loc": "upper left", "bbox_to_anchor": (1.01, 1), "frameon": False}


# The GPU-work strips: (lane, style, legend) for computation (False) and collectives (True). A
# collective's kernel waits for its peers, so its strip can outrun its bar: drawn hatched along
# the bar's top edge, it stays apart from the black strips along the bottom edges.
COLLECTIVES = frozenset({"all-reduce", "broadcast buffers"})
COLLECTIVE_STRIP = {"facecolor": "#777777", "hatch": "////", "edgecolor": "w", "linewidth": 0}
STRIPS = {
    False: (0.22, {"color": "k"}, "GPU work (profiler):\nits total, drawn from\nthe bar's start"),
    True: (
        -0.22,
        COLLECTIVE_STRIP,
        "a collective's NCCL\nkernel time (waits for\npeers included), along\nthe bar's top edge",
    ),
}


def _color(phase: str) -> str:
    return PHASE_COLORS.get(phase, "#BBBBBB")


def _phases_in(timeline: Timeline) -> list[str]:
    seen = {r.phase for r in timeline.records}
    return [p for p in PHASES if p in seen] + sorted(seen - set(PHASES))


def _clock_note(timeline: Timeline) -> str:
    if timeline.hardware.device_type == "cuda":
        gpus = "GPU rows: CUDA event pairs (waits for launches included)"
        return f"{gpus}; host row: host clock" if HOST in timeline.devices() else gpus
    if any(r.phase == "replica backward" for r in timeline.records):
        # The calling thread runs every replica's CPU backward, interleaved by sequence number.
        return "host clock; one autograd thread runs every replica's backward"
    return "host clock (simulated devices share the CPU)"


def figure_height(rows: int, legend_entries: int = 0) -> float:
    """Inches for a plot of ``rows`` bars beside a legend of ``legend_entries`` lines, with a
    two-line title: tall enough that neither the rows nor the legend are squeezed."""
    return max(1.5 + 0.5 * rows, 1.1 + 0.26 * legend_entries)


def axes_or_new(ax: Any, height: float) -> Any:
    """``ax`` if given, else the axes of a new figure 10 inches wide and ``height`` tall."""
    return plt.subplots(figsize=(10, height), layout="constrained")[1] if ax is None else ax


def plot_timeline(
    timeline: Timeline, step: int | None = None, title: str | None = None, ax: Any = None
) -> Figure:
    """One row per device, one coloured bar per phase, for one step (default: the last);
    ``title`` says what ran, a second line names the hardware and clock."""
    step = timeline.steps()[-1] if step is None else step
    records = [r for r in timeline.records if r.step == step]
    if not records:
        raise ValueError(f"No records for step {step}; recorded steps: {timeline.steps()}.")
    origin = min(r.start_ms for r in records)
    rows = [d for d in timeline.devices() if any(r.device == d for r in records)]
    phases = _phases_in(timeline)
    ax = axes_or_new(ax, figure_height(len(rows), len(phases)))
    # Longest first, so phases nested in another (backward's parts) are drawn on top.
    records = sorted(records, key=lambda r: -r.duration_ms)
    for y, row in enumerate(rows):
        for r in records:
            if r.device == row:
                ax.barh(
                    y, r.duration_ms, left=r.start_ms - origin, height=0.6, color=_color(r.phase)
                )
                if r.gpu_ms is not None:  # a total: where in the bar it ran is not recorded
                    lane, style, _ = STRIPS[r.phase in COLLECTIVES]
                    ax.barh(y + lane, r.gpu_ms, left=r.start_ms - origin, height=0.16, **style)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first device on top, half a bar of room around
    ax.set_xlabel("time since the first bar began (ms)")
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=_color(p)) for p in phases]
    labels = list(phases)
    for kind in sorted({r.phase in COLLECTIVES for r in records if r.gpu_ms is not None}):
        handles.append(plt.Rectangle((0, 0), 1, 1, **STRIPS[kind][1]))
        labels.append(STRIPS[kind][2])
    ax.legend(handles, labels, **LEGEND_RIGHT)
    hw = timeline.hardware.label()
    what = title or "One training step, per device"
    ax.set_title(f"{what}\n{hw}; {_clock_note(timeline)}", fontsize=10)
    return ax.figure


def plot_phase_breakdown(
    timeline: Timeline, steps: Sequence[int] | None = None, title: str | None = None, ax: Any = None
) -> Figure:
    """Stacked bars: the mean time per step each device spends in each phase, each moment
    once: a phase that holds others (backward) stacks only its time outside them."""
    totals, whole = phase_totals(timeline, steps, own=True), phase_totals(timeline, steps)
    rows = [d for d in timeline.devices() if d in totals]
    phases = _phases_in(timeline)
    ax = axes_or_new(ax, figure_height(len(rows), len(phases)))
    left = [0.0] * len(rows)
    for p in phases:
        widths = [totals[row].get(p, 0.0) for row in rows]
        held = any(round(whole[row].get(p, 0.0) - w, 6) for row, w in zip(rows, widths))
        label = f"{p}, outside the phases it holds" if held else p
        ax.barh(range(len(rows)), widths, left=left, height=0.6, color=_color(p), label=label)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.1f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, max(left, default=1) * 1.15 or 1)
    ax.set_xlabel("mean time per step (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(**LEGEND_RIGHT)
    n = len(timeline.steps() if steps is None else steps)
    what = title or "Where each device's time goes"
    hw = f"{timeline.hardware.label()}; {_clock_note(timeline)}"
    ax.set_title(f"{what}\nmean of {n} step{'s' if n != 1 else ''}, {hw}", fontsize=10)
    return ax.figure


def _ok(results: Sequence[Result]) -> list[Result]:
    return [r for r in results if r.get("status") == "ok" and r.get("step_ms")]


def _by_implementation(results: Sequence[Result]) -> dict[str, list[Result]]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r["devices"]):
        groups[r["implementation"]].append(r)
    order = list(IMPLEMENTATION_LABELS)
    return dict(sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9))


def plot_scaling(
    results: Sequence[Result], hardware: str, title: str = "", ax: Any = None
) -> Figure:
    """Throughput (samples/s) against device count for one workload's rows, with the ideal:
    the one-device, no-wrapper throughput (or the best one-device number) times N."""
    ok = _ok(results)
    ax = axes_or_new(ax, 5)
    counts = sorted({r["devices"] for r in results}) or [1]
    base = [r for r in ok if r["implementation"] == "single"]
    base = base or [r for r in ok if r["devices"] == 1]
    if base:
        one = max(r["samples_per_s"] for r in base)
        ax.plot(counts, [one * n for n in counts], "k--", lw=1, label="ideal (one device x N)")
    labels, elsewhere, note = _labels(results)
    for impl, rows in _by_implementation(ok).items():
        xs, ys = [r["devices"] for r in rows], [r["samples_per_s"] for r in rows]
        style = ":" if impl in elsewhere else "-"
        color = IMPLEMENTATION_COLORS.get(impl)
        ax.plot(xs, ys, marker="o", ls=style, color=color, label=labels[impl])
    ax.set_xticks(counts)
    ax.set_xlabel("devices")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, **LEGEND_RIGHT)
    ax.set_title(f"{title + ': ' if title else ''}throughput vs devices\n({hardware}){note}")
    return ax.figure


def plot_implementations(
    results: Sequence[Result], hardware: str, title: str = "", ax: Any = None
) -> Figure:
    """Step time per implementation, grouped by device count; missing ones are marked."""
    ax = axes_or_new(ax, 5)
    counts = sorted({r["devices"] for r in results})
    impls = [i for i in _by_implementation(results) if i != "single"]
    width = 0.8 / max(len(impls), 1)
    tallest = max((r["step_ms"] for r in _ok(results)), default=1.0)
    rows = {(r["implementation"], r["devices"]): r for r in results}
    small = {"ha": "center", "va": "bottom", "fontsize": 8}
    names, elsewhere, note = _labels(results)
    hatch = {i: {"hatch": "//", "ec": "w"} if i in elsewhere else {} for i in impls}
    for k, impl in enumerate(impls):
        for n_index, n in enumerate(counts):
            row, x = rows.get((impl, n)), n_index - 0.4 + width * (k + 0.5)
            if row is not None and row.get("status") == "ok":
                ax.bar(
                    x, row["step_ms"], width, color=IMPLEMENTATION_COLORS.get(impl), **hatch[impl]
                )
                ax.text(x, row["step_ms"], f"{row['step_ms']:.4g}", **small)
            elif row is not None:  # a failed run is marked where its bar would be
                ax.text(x, tallest * 0.02, row["status"], rotation=90, color="#555555", **small)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=IMPLEMENTATION_COLORS.get(i), **hatch[i]) for i in impls
    ]
    measured = {r["implementation"] for r in _ok(results)}
    labels = [names[i] + ("" if i in measured else "\n(n/a: not measured here)") for i in impls]
    single = [r for r in _ok(results) if r["implementation"] == "single"]
    if single:
        ms = single[0]["step_ms"]
        handles.append(ax.axhline(ms, color=IMPLEMENTATION_COLORS["single"], ls="--", lw=1))
        labels.append(f"{names['single']} ({ms:.4g} ms)")
    ax.set_xticks(range(len(counts)), [f"{n} device{'s' if n > 1 else ''}" for n in counts])
    ax.set_ylabel("median step time (ms), lower is better")
    ax.set_ylim(0, tallest * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles, labels, fontsize=9, **LEGEND_RIGHT)
    what = f"{title + ': ' if title else ''}step time per implementation"
    ax.set_title(f"{what}\n({hardware}){note}")
    return ax.figure


def _labels(results: Sequence[Result]) -> tuple[dict[str, str], set[str], str]:
    """Legend labels, the implementations whose rows ran on another kind of device than most
    (``ran_on``: the benchmark's DDP has no simulated devices), and the title's note on them."""
    by_impl, kinds = _by_implementation(results), [r.get("ran_on") for r in results]
    labels = {impl: IMPLEMENTATION_LABELS.get(impl, impl) for impl in by_impl}
    if len(set(kinds)) <= 1:
        return labels, set(), ""
    common = max(set(kinds), key=kinds.count)
    for impl, rows in by_impl.items():
        labels[impl] += f"\n(on {RAN_ON_LABELS.get(rows[0].get('ran_on'), '?')})"
    elsewhere = {impl for impl, rows in by_impl.items() if rows[0].get("ran_on") != common}
    names = ", ".join(IMPLEMENTATION_LABELS.get(i, i) for i in sorted(elsewhere))
    return labels, elsewhere, f"\n{names} ran elsewhere (see the legend): not comparable"
