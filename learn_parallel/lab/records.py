"""Recorded runs: the one place they are read from, and which machine recorded each.

The runs recorded on GPU machines ship inside the package, one folder per machine, named
after its GPUs (``learn_parallel/lab/recorded/h200-x4``, found through ``importlib.resources``
so a wheel finds them too); ``$LEARN_PARALLEL_DATA`` names another folder of machines
instead (a run just recorded elsewhere). No folder name is written into the chapters: each
file is read from the folder that holds it (`machine_for`), so a recording made on other
GPUs drops in as it is. `provenance` says what each one measured.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from learn_parallel.lab import provenance
from learn_parallel.lab.measure_steps import chain_measurement
from learn_parallel.lab.measurement import HOST, HOST_SYNCED, Measurement
from learn_parallel.lab.timeline import Hardware, Timeline

DATA_ENV = "LEARN_PARALLEL_DATA"


def recorded_root() -> Path:
    """The folder that holds one folder per recorded machine."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    # An installed package (a wheel too) is files on disk: a plain Path, with stat().
    return Path(str(resources.files("learn_parallel.lab") / "recorded"))


def machines(name: str = "") -> list[str]:
    """The recorded machines (folders), or those whose folder holds the file ``name``."""
    root = recorded_root()
    found = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [m for m in found if not name or (root / m / name).is_file()]


def machine_for(name: str) -> str | None:
    """The machine whose folder holds ``name``; of several, the one with the most GPUs (in
    its folder name, ``-x4``), then the one recorded last."""

    def rank(machine: str) -> tuple[int, str]:
        gpus = re.search(r"-x(\d+)$", machine)
        data = read_json(name, machine) if name.endswith(".json") else None
        return (int(gpus[1]) if gpus else 0, str((data or {}).get("date", "")))

    return max(machines(name), key=rank, default=None)


def recorded_file(name: str, machine: str | None = None) -> Path | None:
    """``name`` as recorded on ``machine`` (default: `machine_for`), or None."""
    machine = machine or machine_for(name)
    path = recorded_root() / machine / name if machine else None
    return path if path is not None and path.is_file() else None


def read_json(name: str, machine: str | None = None) -> dict[str, Any] | None:
    """The JSON ``name`` of ``machine`` (default: `machine_for`), or None (quietly)."""
    path = recorded_file(name, machine)
    return json.loads(path.read_text()) if path is not None else None


def load_json(name: str, machine: str | None = None) -> dict[str, Any] | None:
    """The JSON ``name`` (as `read_json`), or None with one line saying what is missing; one
    line too when the code it measured has changed since it was recorded.

    A chapter goes on without it: the live measurements still run.
    """
    data = read_json(name, machine)
    where = machine or machine_for(name) or "any recorded machine"
    if data is None:
        print(
            f"No recorded {name} for {where}: the recorded plots are skipped, the live ones "
            "still run (book/data/record_gpu_runs.sh records it)."
        )
    elif stale := provenance.staleness_line(data):
        print(f"{name} ({where}): {stale}")
    return data


@dataclass
class Recorded:
    """A GPU machine's recorded runs, as shipped under ``learn_parallel/lab/recorded/<machine>``."""

    machine: str
    hardware: str  # the GPUs, as the recording names them: "4 x NVIDIA H200"
    measurements: dict[str, Measurement]
    timelines: dict[str, Timeline]
    bench: dict[str, Any] | None = None  # the benchmark's bench.json
    chain_bench: dict[str, Any] | None = None
    date: str = ""
    source: str = ""  # the folder it was read from
    # A second run of every measurement made right after the first (chapters-repeat.json),
    # to show how much host-side timings move between runs; empty when not recorded.
    repeat: dict[str, Measurement] = field(default_factory=dict)

    def measurement(self, key: str) -> Measurement:
        if key not in self.measurements:
            raise KeyError(
                f"The recording from {self.machine} has no measurement {key!r} (it has "
                f"{sorted(self.measurements)}); record it again with book/data/record_gpu_runs.sh."
            )
        return self.measurements[key]

    def timeline(self, key: str) -> Timeline:
        if key not in self.timelines:
            raise KeyError(f"The recording from {self.machine} has no timeline {key!r}.")
        return self.timelines[key]

    def bench_results(self, group: str) -> list[dict[str, Any]]:
        """The benchmark's result rows of one workload group (e.g. ``"mlp"``)."""
        rows = [r for r in (self.bench or {}).get("results", []) if r["group"] == group]
        if not rows:
            raise KeyError(f"No benchmark results for {group!r} in the {self.machine} recording.")
        return rows

    def bench_timeline(self, group: str, implementation: str, devices: int) -> Timeline:
        for t in (self.bench or {}).get("timelines", []):
            if (t["group"], t["implementation"], t["devices"]) == (group, implementation, devices):
                return Timeline.from_dict(t["timeline"])
        raise KeyError(f"No {implementation} timeline for {group!r} on {devices} devices.")


def _measurements(data: dict[str, Any]) -> dict[str, Measurement]:
    """A recording's measurements; one made before they named their ``clock`` keeps the clock
    its label names."""
    found = {k: Measurement(**v) for k, v in data["measurements"].items()}
    for m in found.values():
        m.clock = m.clock or m.hardware.rpartition(" (")[2].rstrip(")")
    return found


def load_recorded(machine: str | None = None) -> Recorded:
    """The runs recorded on ``machine`` (default: the one `machine_for` gives chapters.json,
    else bench.json)."""
    machine = machine or machine_for("chapters.json") or machine_for("bench.json") or ""
    chapters, bench = read_json("chapters.json", machine), read_json("bench.json", machine)
    if chapters is None and bench is None:
        raise FileNotFoundError(
            f"No recorded runs in {recorded_root() / machine}: no chapters.json or bench.json. "
            "The recorded runs ship inside the package (learn_parallel/lab/recorded): "
            "reinstall it, or set LEARN_PARALLEL_DATA to a folder that holds a folder per "
            "machine (the layout book/data/record_gpu_runs.sh writes)."
        )
    chapters = chapters or {"measurements": {}, "timelines": {}}
    meta = (bench or {}).get("meta", {})
    hardware = chapters.get("hardware") or Hardware.from_dict(meta["hardware"]).label()
    measurements = _measurements(chapters)
    chain = read_json("chain_bench.json", machine)
    if chain and "chain" not in measurements:  # recorded by its own driver, in its own file
        # chain_bench has always timed with step_times_ms: the host clock, GPUs synchronized.
        clock = chain.get("clock") or (HOST if chain["hardware"].get("simulated") else HOST_SYNCED)
        measurements["chain"] = chain_measurement(
            chain["results"], hardware.split(" (")[0], clock, chain["config"]["feature_map_mb"]
        )
    repeat = read_json("chapters-repeat.json", machine) or {"measurements": {}}
    return Recorded(
        machine=machine,
        hardware=hardware.split(" (")[0],  # recordings before clocks per measurement named one
        measurements=measurements,
        timelines={k: Timeline.from_dict(v) for k, v in chapters["timelines"].items()},
        bench=bench,
        chain_bench=chain,
        date=chapters.get("date") or meta.get("date", ""),
        source=str(recorded_root() / machine),
        repeat=_measurements(repeat),
    )
