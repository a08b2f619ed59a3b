"""Each recorded GPU phase beside its floor: the least time the hardware allows for its work.

A floor is bytes over bandwidth or FLOPs over throughput, both measured on the recording host
(``experiments/floors.py`` -> ``floors.json``, with the bytes and FLOPs counted from the
tensors: `moved`). It counts no launches, memory-bound kernels or waiting, so a bar far above
its floor is not bounded by that resource. `load` reads the file, `Floors.phase` gives a
phase's floor, `table` sets a step's bars beside them, `Floors.step` a ladder rung's step
floor. Simulated devices model no bandwidth or kernel time: no floors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from learn_parallel.lab import provenance, records
from learn_parallel.lab.timeline import Timeline, bars
from learn_parallel.lab.workloads import Workload

COALESCED = 10 * 2**20  # torch.cuda.comm's buffer_size: bytes per broadcast or reduce call
NEAR = 2.0  # a bar within this factor of its floor is bounded by the floor's resource
HOW = {  # what sets each phase's floor
    **dict.fromkeys(
        ("scatter", "grad scatter", "refresh"), "copies from the first GPU, one by one"
    ),
    **dict.fromkeys(("gather", "sum"), "copies into the first GPU, one by one"),
    "replicate": "NCCL broadcasts of parameters and buffers, 10 MiB at a time",
    "buffers": "NCCL broadcasts of the buffers",
    "reduce": "NCCL reduces of the gradients, 10 MiB at a time",
    "all-reduce": "NCCL all-reduce of the gradients",
    **dict.fromkeys(
        ("forward", "replica backward", "forward+backward"), "matmul and convolution throughput"
    ),
    "backward": "its parts in turn (grad scatter, replica backward, reduce)",
}
COLLECTIVES = frozenset(("replicate", "buffers", "reduce", "all-reduce"))  # NCCL: see `bound`
COPIES = frozenset(("scatter", "grad scatter", "refresh", "gather", "sum"))  # copy_ per device
# What each ladder rung, and the reference row measured with them (`ladder_rungs.MEASURED`),
# puts on the step's path besides one replica's compute: communication that its design does
# not overlap with compute (the reference, as step_graphs, all-reduces after every device's
# backward graph, and broadcasts the buffers; kept replicas copy: `refresh`, `sum`). An
# overlapped reduction counts as wholly hidden, so these floors are below any overlap's reach.
DP_PATH = ("scatter", "replicate", "gather", "grad scatter")
KEPT_PATH = ("scatter", "refresh", "gather", "grad scatter")
STEP_PATH = {
    **dict.fromkeys(("torch_dp", "persistent_workers", "our_forward"), (*DP_PATH, "reduce")),
    "lean_replicate": (*DP_PATH, "reduce"),
    "kept_replicas": (*KEPT_PATH, "sum"),
    **dict.fromkeys(("overlap_reduce", "cuda_graphs"), KEPT_PATH),
    "own_optimizers": ("buffers", "scatter", "gather", "grad scatter", "all-reduce"),
    "all_reduce_in_backward": ("buffers", "scatter", "gather", "grad scatter"),
    **dict.fromkeys(("per_device_inputs", "ddp", "ddp_graphs"), ("buffers",)),
    **dict.fromkeys(("step_graphs", "one_thread_reference"), ("buffers", "all-reduce")),
}
# A rung's phase whose floor has another name (None: none): kept replicas refresh by copies.
OWN = {"backward": "replica backward", "broadcast buffers": "buffers"}  # ReplicatedStep's marks
FLOOR_NAMES = {
    **dict.fromkeys(("kept_replicas", "overlap_reduce", "cuda_graphs"), {"replicate": "refresh"}),
    **dict.fromkeys(("own_optimizers", "all_reduce_in_backward"), OWN),
    "per_device_inputs": OWN | {"scatter": None},  # a slice per device: scatter moves nothing
    "step_graphs": OWN
    | {"scatter": None, "optimizer graph": None, "forward+backward graph": "forward+backward"},
}


@dataclass(frozen=True)
class Floor:
    """One phase's floor: what it moves or computes, and the least time for it (None: no floor)."""

    phase: str
    ms: float | None
    moved: int = 0  # bytes between devices
    flops: int = 0

    def amount(self) -> str:
        if self.flops:
            return f"{self.flops / 1e9:.1f} GFLOP"
        return f"{self.moved / 2**20:.2f} MiB" if self.ms is not None else "-"


# [moved]
def moved(counts: dict[str, Any]) -> dict[str, list[int]]:
    """Bytes each phase moves, per device (index i: to or from device i; device 0 keeps its
    own piece, output and tensors), from the counted tensors."""
    others = [0] + [1] * (counts["devices"] - 1)
    return {
        "scatter": [k * b for k, b in zip(others, counts["pieces"])],
        "replicate": [k * (counts["parameters"] + counts["buffers"]) for k in others],
        "gather": [k * b for k, b in zip(others, counts["outputs"])],
        "grad scatter": [k * b for k, b in zip(others, counts["outputs"])],
        "reduce": [k * counts["gradients"] for k in others],
    }


# [moved]


class Floors:
    """A machine's ``floors.json``: bandwidths, throughputs and counts."""

    def __init__(self, record: dict[str, Any], machine: str) -> None:
        self.record, self.machine = record, machine
        self.devices, self.label = record["collectives"]["devices"], record["hardware"]["label"]

    def copy_gb_s(self, src: int, dst: int) -> float:
        return self.record["copies"]["pairs_gb_s"][src][dst]

    def _at(self, kind: str, nbytes: int, key: str) -> float:
        """``key`` of NCCL's ``kind`` at ``nbytes``, interpolated on log(size), clamped."""
        rows = sorted(self.record["collectives"][kind], key=lambda r: r["bytes"])
        sizes = [math.log2(r["bytes"]) for r in rows]
        at = min(max(math.log2(max(nbytes, 1)), sizes[0]), sizes[-1])
        k = max(i for i, s in enumerate(sizes) if s <= at)
        if k == len(rows) - 1:
            return rows[k][key]
        w = (at - sizes[k]) / (sizes[k + 1] - sizes[k])
        return rows[k][key] + w * (rows[k + 1][key] - rows[k][key])

    def bus_gb_s(self, kind: str, nbytes: int) -> float:
        """NCCL's bus bandwidth for ``kind`` (``all_reduce``, ``broadcast``, ``reduce``)."""
        return self._at(kind, nbytes, "busbw_gb_s")

    def collective_ms(self, kind: str, nbytes: int) -> float:
        """NCCL ``kind`` of ``nbytes`` on every recorded GPU: bytes over algorithm bandwidth."""
        return nbytes / (self._at(kind, nbytes, "algbw_gb_s") * 1e9) * 1e3

    def compute_ms(self, flops: dict[str, int]) -> float:
        """FLOPs per operator class over the throughput measured for that class."""
        peak = {c: self.record["compute"][c]["tflop_s"] * 1e12 for c in ("matmul", "conv")}
        return sum(f / peak[c] for c, f in flops.items()) * 1e3

    def counts(self, problem: str, n: int) -> dict[str, Any] | None:
        return self.record["counts"].get(problem, {}).get("by_devices", {}).get(str(n))

    def problem_for(self, workload: dict[str, Any] | str) -> str | None:
        """The counted problem of a recording's workload (its fields, or its description)."""
        for name, counted in self.record["counts"].items():
            fields = counted["workload"]
            if fields and (
                Workload(**fields).describe() == workload
                if isinstance(workload, str)
                else all(workload.get(k) == v for k, v in fields.items())
            ):
                return name
        return None

    def phase(self, problem: str, n: int, name: str) -> Floor:
        """The floor of phase ``name`` of ``problem`` (a counted workload or chapter problem)
        on ``n`` devices; collectives and gather only where ``n`` is the recorded count."""
        c = self.counts(problem, n)
        if c is None:
            return Floor(name, None)
        if name in ("forward", "replica backward", "forward+backward"):
            kinds = {"forward": ["forward"], "replica backward": ["backward"]}
            flops = [c["flops"][k] for k in kinds.get(name, ["forward", "backward"])]
            ms = sum(self.compute_ms(f) for f in flops)
            return Floor(name, ms, flops=sum(sum(f.values()) for f in flops))
        if name == "backward":
            parts = [self.phase(problem, n, p) for p in ("grad scatter", "replica backward")]
            parts.append(self.phase(problem, n, "reduce"))
            if any(p.ms is None for p in parts):
                return Floor(name, None)
            total = sum(p.ms for p in parts)  # type: ignore[misc]
            return Floor(name, total, sum(p.moved for p in parts), sum(p.flops for p in parts))
        per_device = moved(c).get({"refresh": "replicate", "sum": "reduce"}.get(name, name))
        if name in ("scatter", "grad scatter", "refresh"):
            ms = sum(b / (self.copy_gb_s(0, i) * 1e9) for i, b in enumerate(per_device) if b)
            return Floor(name, ms * 1e3, sum(per_device))
        if n != self.devices or name not in HOW:
            return Floor(name, None)
        if name in ("gather", "sum"):  # copy_ orders each after both streams: one after another
            ms = sum(b / (self.copy_gb_s(i, 0) * 1e9) for i, b in enumerate(per_device) if b)
            return Floor(name, ms * 1e3, sum(per_device))
        kind, size = {
            "replicate": ("broadcast", c["parameters"] + c["buffers"]),
            "buffers": ("broadcast", c["buffers"]),
            "reduce": ("reduce", c["gradients"]),
            "all-reduce": ("all_reduce", c["gradients"]),
        }[name]
        moves = size * (n - 1) if kind != "all_reduce" else 2 * size * (n - 1)
        if kind == "all_reduce":  # one flat buffer (the reference row's, after backward)
            return Floor(name, self.collective_ms(kind, size) if size else 0.0, moves)
        # torch.cuda.comm's coalesced broadcast and reduce: one call per 10 MiB bucket
        calls = [COALESCED] * (size // COALESCED) + ([size % COALESCED] if size % COALESCED else [])
        return Floor(name, sum(self.collective_ms(kind, b) for b in calls), moves)

    def step(self, problem: str, n: int, rung: str) -> tuple[float, dict[str, float]] | None:
        """A ladder rung's step floor: one replica's forward and backward at its throughput,
        plus what `STEP_PATH` puts beside it; None where the counts or the rung are unknown."""
        if rung not in STEP_PATH or self.counts(problem, n) is None or n != self.devices:
            return None
        compute = [self.phase(problem, n, p).ms or 0.0 for p in ("forward", "replica backward")]
        parts = {"compute": sum(compute)}
        parts |= {name: self.phase(problem, n, name).ms or 0.0 for name in STEP_PATH[rung]}
        return sum(parts.values()), parts


def load(machine: str) -> Floors | None:
    """The floors recorded on ``machine`` (a line if stale), or None with a line saying so."""
    record = records.read_json("floors.json", machine)
    if record is None:
        how = "book/data/record_gpu_runs.sh records them, part floors"
        return print(f"No floors recorded for {machine} yet: the floors are left out ({how}).")
    if stale := provenance.staleness_line(record):
        print(f"floors.json ({machine}): {stale}")
    return Floors(record, machine)


def bound(floor: Floor, bar: float, gpu: float | None) -> str:
    """What bounds a bar, as its numbers show: the floor's resource (within `NEAR` x), waits
    (GPU work under half the bar; for NCCL, outside its kernels) or slow GPU work."""
    if floor.ms is None:
        why = "the floors were not measured on this many GPUs" if floor.phase in HOW else ""
        return "no floor here: " + (why or "memory-bound work, whose rate nothing here measures")
    if floor.ms and bar < floor.ms:  # a model of the path that fails at this size (latency)
        return f"below its floor ({bar / floor.ms:.1f} x): at this size the floor bounds nothing"
    if floor.ms and bar <= NEAR * floor.ms:
        return f"bounded by {HOW[floor.phase]}: the bar is {bar / floor.ms:.1f} x its floor"
    if gpu is None:
        return "above its floor; the bar has no GPU work recorded to tell waits from slow work"
    if gpu < bar / 2:  # NCCL's kernel time holds its waits for the peers: these are outside it
        nccl = " outside its NCCL kernels" if floor.phase in COLLECTIVES else ""
        return (
            f"bounded by waits{nccl}, not by {HOW[floor.phase]}: its GPU worked {gpu:.3f} ms"
            f"{' (NCCL kernel time)' if nccl else ''} of the {bar:.3f} ms bar and waited the rest"
            " (for launches, or for another GPU)"
        )
    if floor.phase in COLLECTIVES:  # its kernel time may be mostly waiting for the peers
        return (
            f"above its floor ({bar / floor.ms:.1f} x): its GPU work, NCCL kernel time, counts"
            " waiting for the other GPUs' kernels, so it cannot tell waits from transfer"
        )
    if (ratio := gpu / max(floor.ms, 1e-9)) <= NEAR:  # work at about the floor's rate, then waits
        return f"GPU work near its floor ({ratio:.1f} x); the bar's other {bar - gpu:.3f} ms: waits"
    why = "it holds memory-bound kernels too, which no floor covers" if floor.flops else ""
    why = why or "that work runs below the measured rate"
    return f"bounded by its own GPU work, {ratio:.1f} x the floor set by {HOW[floor.phase]}: {why}"


def table(
    timeline: Timeline,
    floors: Floors,
    problem: str,
    step: int | None = None,
    rung: str | None = None,
) -> str:
    """One recorded step (default: the last): per phase what it moves or computes, its floor,
    its longest GPU bar, the GPU work in that bar and the ratio; then what bounds each.
    A ladder ``rung`` names its phases' floors through `FLOOR_NAMES`; a copy phase also gets
    every row's GPU work in it (its longest bar may be on a GPU that runs none of its copies)."""
    n, names = len([row for row in timeline.devices() if row != "host"]), FLOOR_NAMES.get(rung, {})
    last = timeline.steps()[-1] if step is None else step
    done = [r for r in timeline.records if r.step == last and r.device != "host" and r.gpu_ms]
    work = {p: sum(r.gpu_ms for r in done if r.phase == p) for p in {r.phase for r in done}}
    head = f"{'phase':>22} {'amount':>12} {'floor':>9} {'bar':>9} {'GPU work':>9} {'bar/floor':>9}"
    head += "  (ms; amount: bytes over all links, or FLOPs per GPU; bar: longest row's)"
    lines, said = [head], []
    for name, (row, bar, gpu) in bars(timeline, step).items():
        floor_of = names.get(name, name)
        f = floors.phase(problem, n, floor_of) if floor_of else Floor("", None)
        cells = [f"{f.ms:.3f}" if f.ms is not None else "-", f"{bar:.3f}"]
        cells += ["-" if gpu is None else f"{gpu:.3f}", f"{bar / f.ms:.1f}" if f.ms else "-"]
        lines.append(f"{name:>22} {f.amount():>12} " + " ".join(f"{c:>9}" for c in cells))
        none = "no floor here: in this rung it moves nothing between GPUs, or is memory-bound"
        why = bound(f, bar, gpu) if floor_of else none
        if f.ms and f.phase in COPIES and name in work:
            all_rows = f"every row's GPU work in it, {work[name]:.3f} ms, is"
            why += f"; {all_rows} {work[name] / f.ms:.1f} x the floor"
        said.append(f"{name} ({row}): {why}.")
    return "\n".join([*lines, "", *said])


def describe(floors: Floors) -> str:
    """The recorded floors in a few lines: copies, NCCL's bus bandwidth, throughput."""
    r, c = floors.record, floors.record["copies"]
    pairs = [v for s, row in enumerate(c["pairs_gb_s"]) for t, v in enumerate(row) if s != t]
    lines = [
        f"{floors.label}, {r.get('date', '')[:10]}, commit {(r.get('commit') or '?')[:7]}",
        f"copy between two GPUs: {min(pairs):.0f}-{max(pairs):.0f} GB/s ({len(pairs)} pairs);"
        f" into one GPU from all others, one copy after another: {min(c['into_gb_s']):.0f}"
        f"-{max(c['into_gb_s']):.0f} GB/s",
        f"pinned host to GPU: {min(c['h2d_gb_s']):.1f}-{max(c['h2d_gb_s']):.1f} GB/s; GPU to"
        f" host: {min(c['d2h_gb_s']):.1f}-{max(c['d2h_gb_s']):.1f} GB/s",
        f"NCCL {r['collectives']['nccl_version']}, {floors.devices} GPUs, bus bandwidth (GB/s):",
    ]
    for kind in ("broadcast", "reduce", "all_reduce"):
        rows = r["collectives"][kind][::2]  # every other size measured
        cells = ", ".join(f"{_size(x['bytes'])} {x['busbw_gb_s']:.1f}" for x in rows)
        lines.append(f"  {kind:>10}: {cells}")
    stages = [(f"  stage {i}", op) for i, op in enumerate(r["compute"].get("convolutions", []), 1)]
    for name, op in [(k, r["compute"][k]) for k in ("matmul", "conv")] + stages:
        lines.append(f"{name}: {op['tflop_s']:.1f} TFLOP/s ({op['operation']})")
    settings = ", ".join(f"{k} {v}" for k, v in r["compute"]["settings"].items())
    return "\n".join([*lines, f"settings: {settings}"])


def _size(nbytes: int) -> str:
    unit, name = next(u for u in ((2**20, "MiB"), (2**10, "KiB"), (1, "B")) if nbytes >= u[0])
    return f"{nbytes // unit} {name}"
