"""What ``python -m experiments.bench`` prints and draws from a run's report.

`summary_table` is the printed table: where each row ran, its step time and throughput, and
its ratio to torch's DataParallel and to DDP at the same device count, only between rows
that ran on the same kind of device; `write_plots` writes each group's PNG plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments import benchmark as bench

PLACES = {"cuda": "GPU", "sim": "simulated", "cpu": "CPU process"}  # the table's "ran on"
UNLIKE = "≠"  # the table's ratio between rows that ran on different kinds of device


def write_plots(report: dict[str, Any], out: Path) -> list[str]:
    """Scaling, step time, timeline and phase plots per group, where they have data."""
    import matplotlib

    matplotlib.use("Agg")  # a command line run never needs a window
    import matplotlib.pyplot as plt

    from learn_parallel.lab import plots
    from learn_parallel.lab.timeline import Timeline

    hardware = f"{report['meta']['hardware']['label']}, {report['meta']['clock']}"
    written = []

    def save(fig: Any, name: str) -> None:
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(name)

    for group in report["groups"]:
        key, title = group["key"], group["title"]
        rows = [r for r in report["results"] if r["group"] == key]
        if any(r["status"] == "ok" for r in rows):
            save(plots.plot_scaling(rows, hardware, title), f"{key}-scaling.png")
            save(plots.plot_implementations(rows, hardware, title), f"{key}-step-time.png")
        recorded = [
            t
            for t in report["timelines"]
            if t["group"] == key and t["implementation"] == "learn_parallel"
        ]
        if recorded:
            widest = max(recorded, key=lambda t: t["devices"])
            timeline = Timeline.from_dict(widest["timeline"])
            what = f"learn_parallel.DataParallel, {title}"
            save(plots.plot_timeline(timeline, title=f"{what}: one step"), f"{key}-timeline.png")
            phases = plots.plot_phase_breakdown(timeline, title=f"{what}: time per phase")
            save(phases, f"{key}-phases.png")
    return written


def summary_table(report: dict[str, Any]) -> str:
    """The printed table: where each row ran, step time, throughput, and time ratios at the
    same device count between rows that ran on the same kind of device."""
    lines = []
    places = {r.get("ran_on", "?") for r in report["results"]}
    for group in report["groups"]:
        rows = [r for r in report["results"] if r["group"] == group["key"]]
        lines.append(f"\n{group['title']}  ({report['meta'].get('clock', 'clock not recorded')})")
        lines.append(
            f"{'implementation':<16}{'devices':>8}  {'ran on':<12}{'step ms':>9}{'samples/s':>11}"
            f"{'÷ torch DP':>12}{'÷ DDP':>8}"
        )
        ok = {(r["implementation"], r["devices"]): r for r in rows if r["status"] == "ok"}
        order = bench.IMPLEMENTATIONS.index
        for r in sorted(rows, key=lambda r: (r["devices"], order(r["implementation"]))):
            name, n = r["implementation"], r["devices"]
            place = PLACES.get(r.get("ran_on", "?"), "?")
            if r["status"] != "ok":
                lines.append(f"{name:<16}{n:>8}  {place:<12}{r['status']}: {r['note'][:200]}")
                continue
            ratios = [_ratio(r, ok.get((ref, n))) for ref in ("torch_dp", "ddp")]
            lines.append(
                f"{name:<16}{n:>8}  {place:<12}{r['step_ms']:>9.2f}{r['samples_per_s']:>11.0f}"
                f"{ratios[0]:>12}{ratios[1]:>8}"
            )
    lines.append(
        "\n÷ torch DP, ÷ DDP: this step time divided by theirs at the same device count "
        "(below 1 is faster)."
    )
    hardware = report["meta"]["hardware"]["label"]  # the devices of this process's rows
    for place in sorted(places):
        where = bench.RAN_ON.get(place, "not recorded")
        if place in ("cuda", "sim"):
            where += f" ({hardware})"
        lines.append(f"ran on {PLACES.get(place, place)!r}: {where}")
    if len(places) > 1:
        lines.append(f"{UNLIKE}: the two rows ran on different kinds of device; no ratio.")
    if {"sim", "cpu"} <= places:
        lines.append(
            "A simulated device runs every operation through Python (python -m "
            "experiments.sim_cost measures what that adds) and DDP's plain CPU processes do "
            "not: compare DDP with the others on GPUs."
        )
    return "\n".join(lines)


def _ratio(row: dict[str, Any], reference: dict[str, Any] | None) -> str:
    """``row``'s step time over ``reference``'s; UNLIKE where they ran on different devices."""
    if reference is None:
        return "-"
    if row.get("ran_on") != reference.get("ran_on"):
        return UNLIKE
    return f"{row['step_ms'] / reference['step_ms']:.2f}"
