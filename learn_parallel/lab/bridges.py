"""What the bridge chapters draw: autograd graphs, the ladder, the two replicate strategies.

It plots the JSON that ``python -m experiments.ladder`` records on GPUs (``ladder.json``,
``clone.json``; read with `learn_parallel.lab.records.load_json`) and the live runs of
`learn_parallel.lab.ladder.run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from learn_parallel.lab.spread import Spread, compare
from learn_parallel.lab.timing import Timeline


# [autograd-graph]
def autograd_graph(output: torch.Tensor) -> tuple[dict[int, str], list[tuple[int, int]]]:
    """The nodes (id -> name) and edges (from, to) of the graph behind ``output``.

    Walks ``grad_fn.next_functions`` from the output back to the leaves, the
    order in which backward runs. AccumulateGrad nodes (where a leaf's ``.grad``
    is written) are named after their tensor's shape.
    """
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
        ax.text(x, y, nodes[node], ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": "#ffd9a8" if special else "#e8eef7"})  # fmt: skip
    ax.set_ylim(-max(levels) - 0.6, 0.6)
    ax.set_xlim(0, 1)
    ax.axis("off")
    ax.set_title(title)
    return ax.figure


# [autograd-graph]


def _hardware(report: dict[str, Any]) -> str:
    label = report["hardware"]["label"]
    clock = "host clock" if report["hardware"]["device_type"] != "cuda" else "wall clock, synced"
    return f"{label} ({clock})"


def plot_ladder(report: dict[str, Any], kind: str, title: str) -> Figure:
    """Step time per rung for one workload, each bar labelled; with a DDP rung, DDP's bar is
    green, a dashed line marks its time and the labels give each rung's ratio to it. A rung
    that did not run is labelled with its status."""
    rows = [r for r in report["rows"] if r["workload"] == kind]
    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    names = [r["rung"] for r in rows]
    values = [r.get("step_ms", 0.0) if r["status"] == "ok" else 0.0 for r in rows]
    colors = ["#4c72b0" if r["rung"] != "ddp" else "#55a868" for r in rows]
    ax.bar(range(len(rows)), values, color=colors)
    ddp = next((r.get("step_ms") for r in rows if r["rung"] == "ddp" and r["status"] == "ok"), None)
    for i, r in enumerate(rows):
        if r["status"] != "ok":
            ax.text(i, 0, r["status"], rotation=90, ha="center", va="bottom", fontsize=8)
            continue
        label = f"{values[i] / ddp:.2f}x" if ddp else f"{values[i]:.1f} ms"
        ax.text(i, values[i], label, ha="center", va="bottom", fontsize=8)
    if ddp:
        ax.axhline(ddp, color="#55a868", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(rows)), names, rotation=20, ha="right")
    ax.set_ylabel("step time, median (ms)")
    workload = report["workloads"][kind]["title"]
    if ddp:
        legend = "labels: step time / DDP's (green bar, dashed line)"
    else:
        legend = "labels: step time; no DDP rung in this run"
    ax.set_title(f"{title}: {workload}\n{_hardware(report)}; {legend}")
    return fig


def plot_strategies(reports: Sequence[tuple[str, dict[str, Any]]]) -> Figure:
    """Replicate host time and step time of both strategies, one panel pair per report."""
    fig, axes = plt.subplots(
        len(reports), 2, figsize=(10, 3.1 * len(reports)), layout="constrained", squeeze=False
    )
    for (where, report), (left, right) in zip(reports, axes):
        kinds = list(report["workloads"])
        width = 0.38
        for j, strategy in enumerate(("broadcast", "clone")):
            host = [report["replicate_host_ms"][k][strategy] for k in kinds]
            step = [
                next(r.get("step_ms", 0.0) for r in report["rows"]
                     if r["workload"] == k and r["rung"] == strategy)
                for k in kinds
            ]  # fmt: skip
            xs = [i + (j - 0.5) * width for i in range(len(kinds))]
            left.bar(xs, host, width, label=strategy)
            right.bar(xs, step, width, label=strategy)
        titles = [report["workloads"][k]["title"].split(",")[0] for k in kinds]
        for ax, what in ((left, "host time of one replicate (ms)"), (right, "step time (ms)")):
            ax.set_xticks(range(len(kinds)), titles)
            ax.set_ylabel(what)
            ax.legend(frameon=False)
            ax.set_title(f"{where}: {_hardware(report)}", fontsize=9)
    return fig


def rung_timeline(report: dict[str, Any], kind: str, rung: str) -> Timeline | None:
    """The per-device timeline recorded for one rung, if it has one."""
    for r in report["rows"]:
        if r["workload"] == kind and r["rung"] == rung and "timeline" in r:
            return Timeline.from_dict(r["timeline"])
    return None


# [findings]
# The targets for the fast path at 2 GPUs: step time at most this times DDP's.
TARGETS = {"conv": 1.05, "mlp": 1.15}
OWN_PHASES = ("scatter", "replicate", "gather")  # one process's extra steps; DDP has none


def _phase_means(timeline: dict[str, Any], device: str) -> tuple[dict[str, float], float]:
    """Mean milliseconds per step of each phase on ``device``, and of the unmarked time."""
    records = [r for r in timeline["records"] if r["device"] == device]
    steps = sorted({r["step"] for r in records})
    if not steps:
        return {}, 0.0
    totals: dict[str, float] = {}
    unmarked = 0.0
    for step in steps:
        mine = [r for r in records if r["step"] == step]
        for r in mine:
            totals[r["phase"]] = totals.get(r["phase"], 0.0) + r["end_ms"] - r["start_ms"]
        span = max(r["end_ms"] for r in mine) - min(r["start_ms"] for r in mine)
        unmarked += span - sum(r["end_ms"] - r["start_ms"] for r in mine)
    return {p: t / len(steps) for p, t in totals.items()}, unmarked / len(steps)


def _spread(row: dict[str, Any]) -> Spread:
    return Spread.of(row.get("step_ms_all") or [row["step_ms"]])


def ladder_findings(report: dict[str, Any]) -> str:
    """What a ladder recording shows, in words computed from it: times with their spread,
    each rung against the one below it (a tie when the middle halves of their step times
    overlap), failures, and the best rung against DDP and its target."""
    lines = [f"{report['hardware']['label']}, torch {report['torch_version']}: {report['timing']}"]
    lines.append(
        "spread: the middle half of each rung's step times (first to third quartile); "
        "a rung is faster or slower than the one below only if the two do not overlap"
    )
    for kind, workload in report["workloads"].items():
        rows = [r for r in report["rows"] if r["workload"] == kind]
        ddp_row = next((r for r in rows if r["rung"] == "ddp" and r["status"] == "ok"), None)
        ddp = ddp_row["step_ms"] if ddp_row else None
        lines.append(f"\n{workload['title']}")
        below = None
        for r in rows:
            if r["status"] != "ok":
                reason = r["note"].splitlines()[0][:160] if r["note"] else ""
                lines.append(f"  {r['rung']:<19} {r['status']}: {reason}")
                continue
            spread = _spread(r)
            ratio = f"  {r['step_ms'] / ddp:.2f} x DDP" if ddp else ""
            lo, hi = spread.band("middle")
            versus = ""
            if below is not None and r["rung"] != "ddp":
                versus = f"  {compare(spread, _spread(below), 'middle')} vs {below['rung']}"
            lines.append(
                f"  {r['rung']:<19} {r['step_ms']:7.2f} ms ({lo:.2f}-{hi:.2f}){ratio}{versus}"
            )
            if r["rung"] != "ddp":
                below = r
        ours = [r for r in rows if r["rung"] != "ddp" and r["status"] == "ok"]
        if not ours or ddp_row is None:
            lines.append("  no comparison with DDP: a rung or DDP is missing")
            continue
        best = min(ours, key=lambda r: r["step_ms"])
        spread, ddp_spread = _spread(best), _spread(ddp_row)
        against = {"faster": "faster than DDP", "slower": "slower than DDP", "tie": "a tie"}
        ratio, target = best["step_ms"] / ddp, TARGETS.get(kind)
        verdict = ""
        if target is not None:
            limit = target * ddp
            lo, hi = spread.band("middle")
            verdict = f"; target {target:.2f} x DDP ({limit:.2f} ms): " + (
                "met (its whole middle half is below)" if hi <= limit
                else f"missed by {best['step_ms'] - limit:.2f} ms (its whole middle half is above)"
                if lo > limit else "inside its spread, neither met nor missed"
            )  # fmt: skip
        lines.append(
            f"  best rung: {best['rung']}, {ratio:.2f} x DDP, "
            f"{against[compare(spread, ddp_spread, 'middle')]}{verdict}"
        )
        if "timeline" in best:
            source = sorted({r["device"] for r in best["timeline"]["records"]})[0]
            means, unmarked = _phase_means(best["timeline"], source)
            own = sum(means.get(p, 0.0) for p in OWN_PHASES)
            shown = ", ".join(
                f"{p} {ms:.2f}" for p, ms in sorted(means.items(), key=lambda x: -x[1])
            )
            lines.append(
                f"  its timeline on {source}, ms per step (mean of the recorded steps): {shown}; "
                f"between phases {unmarked:.2f}"
            )
            lines.append(
                f"  scatter + replicate + gather, which DDP's processes do not do, take "
                f"{own:.2f} ms per step on {source}: an upper bound on what dropping them "
                f"could save, not a share of the gap (medians {best['step_ms'] - ddp:+.2f} ms "
                f"from DDP)"
            )
    return "\n".join(lines)


def clone_findings(report: dict[str, Any]) -> str:
    """Where clone's extra step time goes, as far as the recording can tell."""
    lines = []
    for kind, workload in report["workloads"].items():
        step = {r["rung"]: r.get("step_ms") for r in report["rows"] if r["workload"] == kind}
        host = report["replicate_host_ms"].get(kind, {})
        if None in (step.get("clone"), step.get("broadcast")) or len(host) < 2:
            lines.append(f"{workload['title']}: a strategy is missing from the recording")
            continue
        extra_step = step["clone"] - step["broadcast"]
        extra_host = host["clone"] - host["broadcast"]
        lines.append(
            f"{workload['title']}: step {step['broadcast']:.2f} ms (broadcast) vs "
            f"{step['clone']:.2f} ms (clone), {extra_step:+.2f} ms; one replicate call on the "
            f"host {host['broadcast']:.2f} vs {host['clone']:.2f} ms, {extra_host:+.2f} ms, "
            f"an estimated {extra_host / extra_step:.0%} of the extra step time (host time "
            f"measured alone, outside a step)"
            if extra_step > 0
            else f"{workload['title']}: clone's step is not slower here "
            f"({step['clone']:.2f} vs {step['broadcast']:.2f} ms)"
        )
    return "\n".join(lines)


# [findings]
