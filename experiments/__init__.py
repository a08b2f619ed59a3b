"""Experiment drivers: the runs that record what the chapters show, outside the package.

Each module is run from the repository root (``python -m experiments.<name> --out DIR``,
as ``book/data/record_gpu_runs.sh`` does) and writes one recorded file; its docstring
names the chapter that reads it. The wheel ships none of them: the chapters read the
recorded files (``learn_parallel/lab/recorded``) through `learn_parallel.lab.records`.
What every driver shares (its parser, its devices, writing its record) is below.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from learn_parallel.devices import Device, device_count, resolve_devices
from learn_parallel.lab import provenance


def driver_parser(
    module: str, doc: str | None, record: str, devices: int | None = None
) -> argparse.ArgumentParser:
    """The argument parser of an experiment driver: its docstring, ``--out`` for ``record``
    and, given a default count, ``--devices`` (read back with `first_devices`)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help=f"folder for {record}")
    if devices is not None:
        parser.add_argument(
            "--devices", type=int, default=devices, help=f"how many devices (default {devices})"
        )
    return parser


def first_devices(count: int) -> list[Device]:
    """This machine's first ``count`` devices, or all of them where it has fewer."""
    return resolve_devices(list(range(min(count, device_count()))))


def write_record(out: Path, name: str, report: dict[str, Any]) -> Path:
    """Write ``report`` as ``out/name`` (JSON), stamped with where it came from and the hashes
    of the files it measured (`learn_parallel.lab.provenance`), and say where."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(provenance.stamp(report, name), indent=1) + "\n")
    print(f"wrote {path}")
    return path
