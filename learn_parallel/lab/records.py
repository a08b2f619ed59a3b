"""Recorded runs: the one place they are read from, and what every recording carries.

The runs recorded on GPU machines ship inside the package, one folder per machine
(``learn_parallel/lab/recorded/<machine>``, found through ``importlib.resources`` so a
wheel finds them too); ``$LEARN_PARALLEL_DATA`` names another folder of machines
instead (a run just recorded elsewhere). `provenance` says what each one measured.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from learn_parallel.lab import provenance

DATA_ENV = "LEARN_PARALLEL_DATA"


def recorded_root() -> Path:
    """The folder that holds one folder per recorded machine."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    # An installed package (a wheel too) is files on disk: a plain Path, with stat().
    return Path(str(resources.files("learn_parallel.lab") / "recorded"))


def recorded_file(name: str, machine: str = "h200-x2") -> Path | None:
    """``name`` as recorded on ``machine`` (a file in its folder), or None."""
    path = recorded_root() / machine / name
    return path if path.is_file() else None


def read_json(name: str, machine: str) -> dict[str, Any] | None:
    """The JSON ``name`` of ``machine``, or None (quietly) when it was not recorded."""
    path = recorded_file(name, machine)
    return json.loads(path.read_text()) if path is not None else None


def load_json(name: str, machine: str = "h200-x2") -> dict[str, Any] | None:
    """The JSON ``name`` of ``machine``, or None with one line saying what is missing; one
    line too when the code it measured has changed since it was recorded.

    A chapter goes on without it: the live measurements still run.
    """
    data = read_json(name, machine)
    if data is None:
        print(
            f"No recorded {name} for {machine}: the recorded plots are skipped, the live ones "
            "still run (book/data/record_gpu_runs.sh records it)."
        )
    elif stale := provenance.staleness_line(data):
        print(f"{name} ({machine}): {stale}")
    return data
