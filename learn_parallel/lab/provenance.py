"""Where a recording came from, and whether the code it measured has changed since.

Every recording the chapters read carries `stamp`: the commit (and where it was read), the
date, the machine as its hardware names itself, the torch, CUDA and cuDNN versions, the
command, what else the recording script ran on the host meanwhile (``ran_beside``), and
``measured``: a digest of the code of each file whose behaviour the recording measures
(`MEASURED` says which; `code_digest`: comments and docstrings left out, so a corrected
sentence does not turn a recording stale), and ``measured_bytes``, their sha256 (the same bytes
need no parsing). `changed_since` compares them with the files here; `stale_recordings`
lists every shipped recording whose measured code has changed.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import time
import tokenize
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import torch

COMMIT_ENV = "LEARN_PARALLEL_COMMIT"  # the commit, where the package is not its own checkout
RUN_LOG_ENV = "LEARN_PARALLEL_RUN_LOG"  # the recording script's log of parts (JSON lines)
PART_ENV = "LEARN_PARALLEL_PART"  # the part of the script this process records


def _files(*names: str) -> list[str]:
    """Paths in a clone: ``"replicate"`` is ``learn_parallel/replicate.py``, ``"experiments/x"``
    a driver outside the package (compared only where it exists, as in a clone)."""
    return [f"{n}.py" if n.startswith("experiments/") else f"learn_parallel/{n}.py" for n in names]


_CORE = _files("devices", "nested", "phases", "scatter_gather", "replicate", "parallel_apply")
_CORE += _files("data_parallel", "lab/timing", "lab/timeline", "lab/steps", "lab/kernels")
_CORE += _files("lab/workloads")
_TOP = _files("lab/ladder_rungs", "lab/ddp_times", "experiments/ddp_times", "ladder/collectives")
_TOP += _files("ladder/fast", "ladder/buckets", "ladder/graphs")
_TOP += _files("ladder/kept_replicas", "ladder/replicated")
# What each recording measured.
MEASURED: dict[str, list[str]] = {
    "chapters.json": _CORE
    + _files("lab/measurement", "lab/measure_pieces", "lab/measure_steps", "lab/measure_tuple")
    + _files("variants/tuple_parallel", "experiments/measure"),
    "bench.json": _CORE + _TOP + _files("experiments/benchmark", "experiments/bench_settings"),
    "chain_bench.json": _CORE
    + _files("lab/chain_bench", "variants/options", "experiments/chain_bench"),
    "ladder.json": _CORE
    + _TOP
    + _files("lab/ladder", "lab/reference_step", "variants/clone_replicate", "experiments/ladder"),
    "clone.json": _CORE + _files("lab/ladder", "lab/ladder_rungs", "variants/clone_replicate"),
    "distributed.json": _CORE
    + _files("lab/ddp_timeline", "lab/processes", "ladder/distributed", "ladder/collectives")
    + _files("ladder/buckets", "experiments/ddp_timeline"),
    "persistent_workers.json": _files("parallel_apply", "lab/persistent_workers")
    + _files("experiments/persistent_workers", "experiments/worker_probes"),
    "timeline_check.json": _CORE + _files("experiments/timeline_check"),
    "recorder_cost.json": _CORE + _files("lab/trace", "experiments/recorder_cost"),
    "gather_probe.json": _files("lab/gather_probe", "experiments/gather_probe"),
    "torchrun.json": _files("ladder/launch", "ladder/train", "ladder/distributed", "phases")
    + _files("ladder/collectives", "ladder/buckets", "experiments/torchrun_times"),
    # The counts mirror the workloads and the chapters' measurements (experiments/floor_counts).
    "floors.json": _files("lab/workloads", "lab/measure_steps", "lab/measure_pieces")
    + _files("experiments/floors", "experiments/floor_counts"),
    "profiler_tax.json": _CORE
    + _files("lab/ladder_rungs", "lab/trace", "experiments/profiler_tax"),
}
# The second run of every chapter measurement, made right after the first by the same code.
MEASURED["chapters-repeat.json"] = MEASURED["chapters.json"]


def package_dir() -> Path:
    return Path(str(resources.files("learn_parallel")))  # a wheel's, or a clone's


def code_digest(source: str) -> str:
    """``"code:<sha256>"`` of ``source`` without its comments, docstrings and blank lines.
    Line-based, from the positions `ast` and `tokenize` give, so every Python 3 agrees."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
            lines[first.lineno - 1 : first.end_lineno] = [""] * (
                first.end_lineno - first.lineno + 1
            )
    code = "\n".join(line.rstrip() for line in lines if line.strip())
    return "code:" + hashlib.sha256(code.encode()).hexdigest()


def file_hashes(names: Iterable[str], *, raw: bool = False) -> dict[str, str]:
    """``{name: code_digest}`` of files named as in a clone (``learn_parallel/devices.py``), or
    with ``raw`` the sha256 of their bytes; one that does not exist here (moved, deleted, a
    driver a wheel lacks) is ``"missing"``."""
    paths = {name: package_dir().parent / name for name in sorted(set(names))}
    hashes = {}
    for name, path in paths.items():
        if not path.is_file():
            hashes[name] = "missing"
        elif raw:
            hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            hashes[name] = code_digest(path.read_text())
    return hashes


def commit() -> tuple[str | None, str]:
    """The commit and where it was read: ``$LEARN_PARALLEL_COMMIT`` (a GPU host's copy may be a
    git checkout of its own), else HEAD of the package's own checkout, else None, said so."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV], f"${COMMIT_ENV}"
    top = _git("rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == package_dir().parent.resolve():
        return _git("rev-parse", "HEAD"), "git: the package's own checkout"
    return None, f"unknown: not a git checkout of the package, and ${COMMIT_ENV} is not set"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(package_dir()), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def ran_beside(now: float | None = None) -> list[dict[str, Any]] | None:
    """The other parts of the recording script whose runs overlapped this one, from its log
    (``$LEARN_PARALLEL_RUN_LOG``, one JSON line per start and end of a part, each run with
    its ``id``; ``$LEARN_PARALLEL_PART`` is this run's): each with its GPUs and times (s
    since the epoch); None where no log was kept (a run outside the script)."""
    path, mine = os.environ.get(RUN_LOG_ENV), os.environ.get(PART_ENV)
    if not path or not mine or not Path(path).is_file():
        return None
    now = time.time() if now is None else now
    runs: dict[str, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        event = json.loads(line)
        run = runs.setdefault(event["id"], {"part": event["part"], "gpus": event["gpus"]})
        run[event["event"]] = event["time"]
    start = runs.get(mine, {}).get("start", now)
    return [
        run
        for key, run in runs.items()
        if key != mine and run["start"] < now and run.get("end", now) > start
    ]


def beside_line(record: dict[str, Any]) -> str:
    """One line on what the recording script ran on the same host while ``record`` was made."""
    beside = record.get("ran_beside")
    if beside is None:
        return "other runs on the host meanwhile: not in this file (see book/data/README.md)"
    if not beside:
        return "nothing else of the recording script ran on the host meanwhile"
    runs = ", ".join(f"{r['part']} (the host's GPUs {r['gpus']})" for r in beside)
    return (
        f"ran while other parts of the recording script ran on the same host: {runs}; "
        "each lane numbers the GPUs it sees from cuda:0"
    )


def machine() -> str:
    """The machine as its hardware names itself: ``2 x NVIDIA H200, 32 CPU cores (CPU
    model)``: host-clock timings are the CPU's, not the GPUs'."""
    cores = f"{os.cpu_count()} CPU cores"
    try:  # Linux names the CPU model; elsewhere the count alone
        info = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
        cores += f" ({model})"
    except (OSError, StopIteration):
        pass
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    except (AssertionError, RuntimeError):  # a torch built without CUDA, told it has GPUs
        names = []
    if names:
        return f"{count} x {' + '.join(names)}, {cores}"
    return f"{platform.processor() or platform.machine()}, {cores}, no GPU"


def run_metadata(command: str) -> dict[str, Any]:
    """When, on what, from which commit and by which command a recording was made (absolute
    paths in the command keep their last part: readers have no use for the machine's folders)."""
    command = re.sub(r"(?<!\S)/\S*/(\S+)", r".../\1", command)  # /tmp/x/h200-x4: .../h200-x4
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    sha, source = commit()
    return {
        "commit": sha,
        "commit_source": source,
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
        "command": metadata["command"],
        "ran_beside": ran_beside(),
        "measured": file_hashes(MEASURED[recording]),
        "measured_bytes": file_hashes(MEASURED[recording], raw=True),
    }


def changed_since(record: dict[str, Any]) -> list[str]:
    """Measured files of ``record`` changed here since (a driver a wheel lacks is unknown)."""
    recorded_bytes = record.get("measured_bytes") or {}
    measured = dict(record.get("measured") or {})
    # The same bytes are the same code: only a file whose bytes changed is parsed again.
    bytes_now = file_hashes((n for n in measured if n in recorded_bytes), raw=True)
    same = {n for n, h in bytes_now.items() if h == recorded_bytes[n]}
    now = file_hashes(n for n in measured if n not in same) | {n: measured[n] for n in same}
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
    lines = [(path, staleness_line(json.loads(path.read_text()))) for path in recordings()]
    return [(path, line) for path, line in lines if line]


def staleness_line(record: dict[str, Any]) -> str | None:
    """A chapter's line when ``record``'s measured code changed (or it names none), else None."""
    short = (record.get("commit") or "")[:7] or "an unknown commit"
    if "measured" not in record:
        return f"recorded from {short}, before recordings named the code they measured"
    changed = changed_since(record)
    return f"recorded from {short}; {', '.join(changed)} changed since" if changed else None
