"""Find the JSON files that single experiments recorded on GPUs (``record_gpu_runs.sh`` parts).

``persistent_workers.json`` (part ``workers``), ``timeline_check.json`` (``timeline``),
``gather_probe.json`` (``gatherprobe``) and the Perfetto traces (``trace``) sit in a
machine's folder of recorded runs, directly or in a subfolder named after the part.
A chapter that reads one copes with it missing: `load_json` prints one line that
says which file and how to record it, and returns None.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


def _folders(machine: str) -> list[Path]:
    folders = []
    if os.environ.get("LEARN_PARALLEL_DATA"):
        folders.append(Path(os.environ["LEARN_PARALLEL_DATA"]) / machine)
    folders.append(_HERE / "recorded" / machine)  # shipped with the package
    folders.append(Path.cwd() / "data" / machine)  # a notebook running in book/
    folders.append(_HERE.parents[1] / "book" / "data" / machine)  # a repository checkout
    return folders


def recorded_file(name: str, machine: str = "h200-x2") -> Path | None:
    """The first ``name`` found for ``machine`` (also one level down), else None."""
    for folder in _folders(machine):
        if not folder.is_dir():
            continue
        for path in [folder / name, *sorted(folder.glob(f"*/{name}"))]:
            if path.is_file():
                return path
    return None


def load_json(name: str, machine: str = "h200-x2") -> dict[str, Any] | None:
    """The recorded JSON ``name`` of ``machine``, or None with a one-line message."""
    path = recorded_file(name, machine)
    if path is None:
        print(
            f"No recorded {name} for {machine} yet: record it with "
            f"book/data/record_gpu_runs.sh on a machine with two or more GPUs."
        )
        return None
    return json.loads(path.read_text())
