"""What the bridge chapters draw and compare: autograd graphs, the ladder, the clone set.

It plots the runs recorded on GPUs (``ladder.json``, ``clone.json``) and the live runs of
`ladder.run`; `verdict` is the one rule that calls a rung faster, slower or a tie (from five
rounds up), for whole steps and (`phase_lines`) for each phase's bars over the rounds.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from learn_parallel.lab.floors import COLLECTIVES, FLOOR_NAMES
from learn_parallel.lab.measurement import HOST, HOST_RETURNED, HOST_SYNCED
from learn_parallel.lab.spread import Spread, compare
from learn_parallel.lab.timeline import Timeline


def autograd_graph(output: torch.Tensor) -> tuple[dict[int, str], list[tuple[int, int]]]:
    """The nodes (id -> name) and edges (from, to) of the graph behind ``output``, walking
    ``grad_fn.next_functions`` back to the leaves; AccumulateGrad nodes (where a leaf's
    ``.grad`` is written) are named after their tensor's shape."""
    nodes: dict[int, str] = {}
    edges: list[tuple[int, int]] = []
    alive: list[Any] = []  # ids name nodes only while the nodes live: keep every one alive
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in nodes:
            continue
        alive.append(node)
        name = type(node).__name__
        if hasattr(node, "variable"):
            name = f"AccumulateGrad\n{tuple(node.variable.shape)}"
        nodes[id(node)] = name.replace("Backward0", "").replace("Backward", "")
        for child, _ in node.next_functions:
            if child is not None:
                edges.append((id(node), id(child)))
                stack.append(child)
    return nodes, edges


def plot_autograd_graph(output: torch.Tensor, title: str, ax: Any = None) -> Figure:
    """Draw the graph behind ``output``: the output on top, leaves at the bottom."""
    nodes, edges = autograd_graph(output)
    depth = {id(output.grad_fn): 0}
    changed, rounds = True, 0
    while changed:  # longest distance from the output: every edge points one level down
        changed, rounds = False, rounds + 1
        if rounds > len(nodes) + 1:  # a DAG settles within len(nodes) rounds
            raise RuntimeError(f"the graph behind {title!r} has a cycle; cannot draw it")
        for parent, child in edges:
            if parent in depth and depth.get(child, -1) < depth[parent] + 1:
                depth[child] = depth[parent] + 1
                changed = True
    levels: dict[int, list[int]] = {}
    for node in nodes:
        levels.setdefault(depth[node], []).append(node)
    where = {}
    for level, members in levels.items():
        members.sort(key=lambda n: nodes[n])
        for i, node in enumerate(members):
            where[node] = ((i + 1) / (len(members) + 1), -level)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.1 * len(levels) + 0.6), layout="constrained")
    for parent, child in edges:
        (x0, y0), (x1, y1) = where[parent], where[child]
        ax.annotate("", (x1, y1 + 0.18), (x0, y0 - 0.18), arrowprops={"arrowstyle": "->"})
    for node, (x, y) in where.items():
        special = nodes[node].startswith(("Broadcast", "ReduceAdd"))
        box = {"boxstyle": "round", "fc": "#ffd9a8" if special else "#e8eef7"}
        ax.text(x, y, nodes[node], ha="center", va="center", fontsize=8, bbox=box)
    ax.set_ylim(-max(levels) - 0.6, 0.6)
    ax.set_xlim(0, 1)
    ax.axis("off")
    ax.set_title(title)
    return ax.figure


ENOUGH_ROUNDS = 5  # the book's rule: a verdict reads at least five interleaved rounds
DDP_COLORS = {"ddp": "#55a868", "ddp_graphs": "#8fd19e"}


def clock_of(report: dict[str, Any]) -> str:
    """What timed a ladder's or a benchmark's step times: the file's ``clock`` (older files
    name none; their drivers always timed with `step_times_ms`, this same clock)."""
    meta = report.get("meta", report)
    simulated = meta["hardware"].get("device_type", "cuda") != "cuda"
    return meta.get("clock") or (HOST if simulated else HOST_SYNCED)


def plot_ladder(report: dict[str, Any], kind: str, title: str) -> Figure:
    """Step time per rung for one workload, each bar labelled; with a DDP rung, DDP's bar is
    green, a dashed line marks its time and the labels give each rung's ratio to it. A bar is
    the median of the rounds, its whisker their range. A rung that did not run is labelled
    with its status."""
    rows = [r for r in report["rows"] if r["workload"] == kind]
    fig, ax = plt.subplots(figsize=(10, 3.8), layout="constrained")
    values = [r.get("step_ms", 0.0) if r["status"] == "ok" else 0.0 for r in rows]
    ax.bar(range(len(rows)), values, color=[DDP_COLORS.get(r["rung"], "#4c72b0") for r in rows])
    ddp = next((r.get("step_ms") for r in rows if r["rung"] == "ddp" and r["status"] == "ok"), None)
    for i, r in enumerate(rows):
        if r["status"] != "ok":
            ax.text(i, 0, r["status"], rotation=90, ha="center", va="bottom", fontsize=8)
            continue
        rounds = repeats_of(r)
        if len(rounds) > 1:
            ax.plot([i, i], [min(rounds), max(rounds)], color="black", linewidth=1)
        label = f"{values[i] / ddp:.2f}x" if ddp else f"{values[i]:.1f} ms"
        ax.text(i, max(rounds or [values[i]]), label, ha="center", va="bottom", fontsize=8)
    if ddp:
        ax.axhline(ddp, color="#55a868", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(rows)), [r["rung"] for r in rows], rotation=25, ha="right")
    ax.set_ylabel("step time, median of rounds (ms)")
    workload = report["workloads"][kind]["title"]
    legend = " / DDP's (green bar, dashed line)" if ddp else "; no DDP rung in this run"
    hardware = f"{report['hardware']['label']} ({clock_of(report)})"
    ax.set_title(f"{title}: {workload}\n{hardware}; labels: step time{legend}")
    return fig


def plot_strategies(reports: Sequence[tuple[str, dict[str, Any]]]) -> Figure:
    """Replicate host time and step time of both strategies, one panel pair per report."""
    fig, axes = plt.subplots(
        len(reports), 2, figsize=(10, 3.1 * len(reports)), layout="constrained", squeeze=False
    )
    for (where, report), (left, right) in zip(reports, axes):
        kinds = list(report["workloads"])
        width = 0.38
        step_ms = {(r["workload"], r["rung"]): r.get("step_ms", 0.0) for r in report["rows"]}
        for j, strategy in enumerate(("broadcast", "clone")):
            host = [report["replicate_host_ms"][k][strategy] for k in kinds]
            step = [step_ms[k, strategy] for k in kinds]
            xs = [i + (j - 0.5) * width for i in range(len(kinds))]
            left.bar(xs, host, width, label=strategy)
            right.bar(xs, step, width, label=strategy)
        titles = [report["workloads"][k]["title"].split(",")[0] for k in kinds]
        # replicate_host_ms has a timer of its own (files that name none used the same one)
        clocks = (report.get("replicate_clock", HOST_RETURNED), clock_of(report))
        whats = ("host time of one replicate (ms)", "step time (ms)")
        for ax, what, clock in zip((left, right), whats, clocks):
            ax.set_xticks(range(len(kinds)), titles)
            ax.set_ylabel(what)
            ax.legend(frameon=False)
            title = f"{where}: {report['hardware']['label']} ({clock})"
            ax.set_title(textwrap.fill(title, 55), fontsize=9)  # two panels side by side
    return fig


def rung_timeline(report: dict[str, Any], kind: str, rung: str) -> Timeline | None:
    """The per-device timeline recorded for one rung, if it has one."""
    for r in report["rows"]:
        if r["workload"] == kind and r["rung"] == rung and "timeline" in r:
            return Timeline.from_dict(r["timeline"])
    return None


def repeats_of(row: dict[str, Any]) -> list[float]:
    """A row's median step time per round; a recording made before rounds existed has one."""
    if row.get("repeats"):
        return list(row["repeats"])
    return [row["step_ms"]] if "step_ms" in row else []


def verdict(row: dict[str, Any], other: dict[str, Any]) -> str:
    """``"faster"``, ``"slower"`` or ``"tie"``: ``row`` against ``other``, by the range of
    their rounds' medians (a difference inside that spread is a tie); ``"no verdict (2
    rounds)"`` and the like when either has fewer than `ENOUGH_ROUNDS` rounds."""
    mine, theirs = repeats_of(row), repeats_of(other)
    if (n := min(len(mine), len(theirs))) < ENOUGH_ROUNDS:
        return f"no verdict ({n} round{'s' * (n != 1)})"
    return compare(mine, theirs, "range")


def timing_of(report: dict[str, Any]) -> str:
    """A ladder run's ``timing``, its clauses on per-phase bars and on DDP's ranks left out
    where it recorded no timeline and no DDP row."""
    from learn_parallel.lab.ladder_rungs import DDP_ROWS

    bars = "then 0 steps recorded per device, whose mean bar per phase is the round's phase_ms"
    timing = report["timing"].replace(bars, "no timeline recorded")
    if not any(row["rung"] in DDP_ROWS for row in report["rows"]):
        timing = timing.replace(" (DDP: the slowest rank per step)", "")
    return timing


def ladder_table(report: dict[str, Any]) -> str:
    """Per workload and rung: the median of the rounds (their range), the ratio to DDP's
    median, and `verdict` against the rung below and against DDP (none from too few rounds)."""
    lines = [f"{report['set']} on {report['hardware']['label']} ({clock_of(report)})"]
    for kind, workload in report["workloads"].items():
        rows = {r["rung"]: r for r in report["rows"] if r["workload"] == kind}
        ddp = rows.get("ddp") if rows.get("ddp", {}).get("status") == "ok" else None
        lines.append(f"\n{workload['title']}")
        for name, r in rows.items():
            if r["status"] != "ok":
                reason = r["note"].splitlines()[0][:110] if r["note"] else ""
                lines.append(f"  {name:<23} {r['status']}: {reason}")
                continue
            spread = repeats_of(r)
            line = f"  {name:<23} {r['step_ms']:8.2f} ms ({min(spread):.2f}-{max(spread):.2f})"
            if "host_ms" in r:
                line += f", host {r['host_ms']:6.2f} ms"
            if ddp is not None:
                line += f" {r['step_ms'] / ddp['step_ms']:5.2f} x DDP"
            below = rows.get(r.get("below") or "")
            if below is not None and below["status"] == "ok":
                line += f", {verdict(r, below)} vs {below['rung']}"
            if ddp is not None and "ddp" not in (name, r.get("below")):
                line += f", {verdict(r, ddp)} vs ddp"
            lines.append(line)
        for name, ms in report.get("replicate_host_ms", {}).get(kind, {}).items():
            clock = report.get("replicate_clock", HOST_RETURNED)  # older files: the same timer
            lines.append(f"  one replicate, {name:<15} {ms:8.3f} ms ({clock})")
    return "\n".join(lines)


def phase_lines(report: dict[str, Any], kind: str, rung: str, below: str) -> list[str]:
    """Per phase, the mean bar per step and device of ``below`` and of ``rung``: the median of
    the rounds (their range) and `verdict`'s rule on the two ranges; then, where the first
    round's timelines carry it, the GPU work inside those bars. None without rounds. A phase
    whose bars all stay under 0.1 ms is printed in µs with two decimals, so that ranges the
    verdict tells apart print apart."""
    rows = {r["rung"]: r for r in report["rows"] if r["workload"] == kind}
    rounds = [rows[name].get("phase_ms") or [] for name in (below, rung)]
    if not all(rounds):
        return []
    work = [_gpu_work(rows[name].get("timeline")) for name in (below, rung)]
    lines = []
    for phase in sorted({p for r in rounds for by_phase in r for p in by_phase}):
        was, now = ([by_phase.get(phase, 0.0) for by_phase in r] for r in rounds)
        said = verdict({"repeats": now}, {"repeats": was})
        scale, unit = (1e3, "µs") if max(was + now) < 0.1 else (1.0, "ms")
        a, b = (Spread.of([v * scale for v in values]) for values in (was, now))
        line = f"  {phase:20} {a.median:6.2f} ({a.low:.2f}-{a.high:.2f}) -> "
        line += f"{b.median:6.2f} ({b.low:.2f}-{b.high:.2f}) {unit}, {said}"
        if all(work):
            gpu = [scale * w.get(phase, 0.0) for w in work]
            line += f"; GPU work {gpu[0]:.2f} -> {gpu[1]:.2f}"
            nccl = [
                n for n in (below, rung) if FLOOR_NAMES.get(n, {}).get(phase, phase) in COLLECTIVES
            ]
            whose = f"{nccl[0]}'s: " if len(nccl) == 1 else ""  # a pair whose phases differ
            line += f" ({whose}NCCL kernel time, waits for peers included)" if nccl else ""
        lines.append(line)
    return lines


def _gpu_work(timeline: dict[str, Any] | None) -> dict[str, float]:
    """Per phase, the GPU work inside its bars per step and device row (ms); {} without it."""
    records = [r for r in (timeline or {}).get("records", []) if r["device"] != "host"]
    if not records or any(r.get("gpu_ms") is None for r in records):
        return {}
    per = len({r["device"] for r in records}) * len({r["step"] for r in records})
    work: dict[str, float] = {}
    for r in records:
        work[r["phase"]] = work.get(r["phase"], 0.0) + r["gpu_ms"] / per
    return work
