"""Where a recording came from, and whether the code it measured has changed since.

Every recording the chapters read carries `stamp`: the commit, the date, the machine as its
hardware names itself, the torch, CUDA and cuDNN versions, the command, and ``measured``:
the sha256 of each package file whose behaviour the recording measures (`MEASURED` says
which, per recording). `changed_since` compares those hashes with the files installed now;
`stale_recordings` lists every recording whose measured code has changed, and
``python -m learn_parallel.lab.provenance`` prints that list.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import torch

COMMIT_ENV = "LEARN_PARALLEL_COMMIT"  # set by the recording script where .git did not travel

# What each recording measured, as paths in a clone; the files outside the package (the
# experiment drivers) are compared only where they exist, as in a clone.
_CORE = [
    f"learn_parallel/{name}.py"
    for name in ("devices", "nested", "phases", "scatter_gather", "replicate")
    + ("parallel_apply", "data_parallel", "lab/timing", "lab/steps", "lab/kernels", "lab/workloads")
]
_FAST = [f"learn_parallel/variants/{n}.py" for n in ("fast", "fast_buckets", "fast_graphs")]
_FAST += [f"learn_parallel/variants/{n}.py" for n in ("fast_replicas", "replicated")]
_LADDER = [f"learn_parallel/lab/{n}.py" for n in ("ladder", "ladder_rungs", "ddp_times")]
MEASURED: dict[str, list[str]] = {
    "chapters.json": [*_CORE, "learn_parallel/lab/measure.py", "experiments/measure.py"]
    + ["learn_parallel/variants/tuple_parallel.py"],
    "bench.json": [*_CORE, "learn_parallel/lab/ddp_times.py", "experiments/benchmark.py"],
    "chain_bench.json": [*_CORE, "learn_parallel/lab/chain_bench.py"]
    + ["learn_parallel/variants/options.py", "experiments/chain_bench.py"],
    "ladder.json": [*_CORE, *_LADDER, *_FAST, "learn_parallel/variants/collectives.py"]
    + ["learn_parallel/variants/clone_replicate.py", "experiments/ladder.py"],
    "clone.json": [*_CORE, *_LADDER, "learn_parallel/variants/clone_replicate.py"],
    "distributed.json": [
        *_CORE,
        "learn_parallel/lab/ddp_timeline.py",
        "experiments/ddp_timeline.py",
    ]
    + ["learn_parallel/variants/distributed.py", "learn_parallel/variants/collectives.py"],
    "persistent_workers.json": ["learn_parallel/parallel_apply.py"]
    + ["learn_parallel/lab/persistent_workers.py", "experiments/persistent_workers.py"],
    "timeline_check.json": [*_CORE, "experiments/timeline_check.py"],
    "recorder_cost.json": [*_CORE, "learn_parallel/lab/trace.py", "experiments/recorder_cost.py"],
    "gather_probe.json": ["learn_parallel/lab/gather_probe.py", "experiments/gather_probe.py"],
}


def package_dir() -> Path:
    return Path(str(resources.files("learn_parallel")))


def file_hashes(names: Iterable[str]) -> dict[str, str]:
    """``{name: sha256}`` of files named as in a clone (``learn_parallel/devices.py``).

    A file that does not exist here (moved, deleted, or a driver a wheel does not carry)
    hashes to ``"missing"``.
    """
    root = package_dir().parent
    hashes = {}
    for name in sorted(set(names)):
        path = root / name
        hashes[name] = (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        )
    return hashes


def commit() -> str | None:
    """The commit recorded: ``$LEARN_PARALLEL_COMMIT``, else git's HEAD of a checkout, else None."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=package_dir(),
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def machine() -> str:
    """The machine as its hardware names itself: ``2 x NVIDIA H200, 32 CPU cores``."""
    cores = f"{os.cpu_count()} CPU cores"
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    except (AssertionError, RuntimeError):  # a torch built without CUDA, told it has GPUs
        names = []
    if names:
        return f"{count} x {' + '.join(names)}, {cores}"
    return f"{platform.processor() or platform.machine()}, {cores}, no GPU"


def run_metadata(command: str) -> dict[str, Any]:
    """When, on what, from which commit and by which command a recording was made.

    Absolute paths in the command (``--out /tmp/x/h200-x4``) keep their last part only: a
    recording ships to readers, who have no use for the recording machine's folders.
    """
    command = re.sub(r"(?<!\S)/\S*/(\S+)", r".../\1", command)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": cudnn,
        "python_version": platform.python_version(),
        "command": command,
    }


def stamp(report: dict[str, Any], recording: str) -> dict[str, Any]:
    """``report`` with its run metadata and the hashes of what it measured (`MEASURED`)."""
    command = report.get("command") or report.get("meta", {}).get("command") or ""
    metadata = run_metadata(command)
    return {**report, **{k: v for k, v in metadata.items() if k not in report}} | {
        "measured": file_hashes(MEASURED[recording])
    }


def changed_since(record: dict[str, Any]) -> list[str]:
    """The measured files of ``record`` that differ from the files here now.

    A file outside the package that is missing here (a wheel has no ``experiments/``) is
    unknown, not changed.
    """
    measured = record.get("measured") or {}
    now = file_hashes(measured)
    return [
        name
        for name, digest in measured.items()
        if now[name] != digest and (name.startswith("learn_parallel/") or now[name] != "missing")
    ]


def recordings() -> list[Path]:
    """Every stamped recording shipped with the package (``lab/recorded/<machine>/...``)."""
    root = package_dir() / "lab" / "recorded"
    return sorted(p for p in root.rglob("*.json") if p.name in MEASURED)


def stale_recordings() -> list[tuple[Path, str]]:
    """``(recording, why)`` for each shipped recording that is stale (`staleness_line`)."""
    found = []
    for path in recordings():
        line = staleness_line(json.loads(path.read_text()))
        if line:
            found.append((path, line))
    return found


def staleness_line(record: dict[str, Any]) -> str | None:
    """One line for a chapter when ``record`` measured code that has changed (or does not say
    what it measured), else None."""
    short = (record.get("commit") or "")[:7] or "an unknown commit"
    if "measured" not in record:
        return f"recorded from {short}, before recordings named the code they measured"
    changed = changed_since(record)
    return f"recorded from {short}; {', '.join(changed)} changed since" if changed else None


if __name__ == "__main__":
    root = package_dir() / "lab" / "recorded"
    found = stale_recordings()
    for path, line in found:
        print(f"{path.relative_to(root)}: {line}")
    print(f"{len(found)} of {len(recordings())} recordings are stale.")
    sys.exit(0)
