"""torch's gather on outputs it was not written for, recorded: ``gather_probe.json``.

    python -m experiments.gather_probe --out DIR

Feeds the pitfalls chapter (its recorded table beside the live
`learn_parallel.lab.gather_probe.probe`) and the glossary's link to the source line
of the torch that ran: ``book/data/record_gpu_runs.sh`` (part ``gatherprobe``) runs it
on GPUs, where the tuple case reaches torch's ``Gather``.
"""

from __future__ import annotations

import inspect
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import torch

from experiments import driver_parser, write_record
from learn_parallel.lab import provenance
from learn_parallel.lab.gather_probe import probe


def source_lines() -> dict[str, Any]:
    """Where ``gather_map``'s fallback line sits in the installed torch's file."""
    from torch.nn.parallel import scatter_gather

    lines, start = inspect.getsourcelines(scatter_gather.gather)
    found = {"torch_version": torch.__version__, "gather_first_line": start, "lines": {}}
    for offset, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(("def gather_map", "return type(out)(", "if isinstance(out")):
            found["lines"][str(start + offset)] = stripped
    return found


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.gather_probe", __doc__, "gather_probe.json")
    args = parser.parse_args(argv)
    report = {
        **provenance.run_metadata(shlex.join(["python", "-m", "experiments.gather_probe", *argv])),
        "gpus": torch.cuda.device_count(),
        "source": source_lines(),
        "cases": probe(),
    }
    for name, both in report["cases"].items():
        print(f"{name}:")
        for who, what in both.items():
            print(f"  {who:15s} {what}")
    print(report["source"])
    write_record(args.out, "gather_probe.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
