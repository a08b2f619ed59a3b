"""Every chapter's per-device measurement on this machine: ``chapters.json``.

    python -m experiments.measure --out DIR [--devices N]

Feeds every chapter's "recorded on GPUs" plot (devices, scatter, replicate, gather,
parallel_apply, data_parallel, source_device, tuple_parallel, pitfalls, performance):
``book/data/record_gpu_runs.sh`` (part ``measure``) runs it twice on a GPU machine and
copies ``DIR/chapters.json`` (and the second run as ``chapters-repeat.json``) into
``learn_parallel/lab/recorded/<machine>/``, which `learn_parallel.lab.records.load_recorded`
reads back. The timelines' GPU work comes from a profiled pass after everything is timed.
"""

from __future__ import annotations

import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from experiments import driver_parser, write_record
from learn_parallel.devices import Device, device_count, resolve_devices
from learn_parallel.lab import measure, provenance
from learn_parallel.lab.kernels import ProfiledPass
from learn_parallel.lab.timeline import Timeline, describe_hardware

MEASUREMENTS: dict[str, Callable[[Sequence[Device]], measure.Measurement]] = {
    "matmul": measure.matmul,
    "source_check": measure.source_check,
    "scatter_copy": measure.scatter_copy,
    "replicate_copy": measure.replicate_copy,
    "replica_forward": measure.replica_forward,
    "gather_targets": measure.gather_targets,
    "tuple_vs_data_parallel": measure.tuple_vs_data_parallel,
    "peak_memory": measure.peak_memory,
    "worker_overhead": measure.worker_overhead,
}
TIMELINES: dict[str, Callable[[Sequence[Device], ProfiledPass], Timeline]] = {
    "parallel_apply": measure.parallel_apply_timeline,
    "training": measure.training_timeline,
}


def record_all(devices: Sequence[Device], command: str = "", progress: bool = True) -> dict:
    """Run every chapter's measurement on ``devices``; a dict ready for chapters.json."""
    report: dict[str, Any] = {
        "schema": "learn_parallel.lab.measure/1",
        **provenance.run_metadata(command),
        "python_version": platform.python_version(),
        "hardware": describe_hardware(devices).label(),  # each measurement names its clock
        "measurements": {},
        "timelines": {},
    }
    later, timelines = ProfiledPass(), {}
    for key, fn in [*MEASUREMENTS.items(), *TIMELINES.items(), ("profiled pass", None)]:
        t0 = time.perf_counter()
        if fn is None:
            later.run()  # the timelines' GPU work, once everything is timed
        elif key in TIMELINES:
            timelines[key] = fn(devices, later)
        else:
            report["measurements"][key] = asdict(fn(devices))
        if progress:
            print(f"{key}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    report["timelines"] = {key: timeline.to_dict() for key, timeline in timelines.items()}
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = driver_parser("experiments.measure", __doc__, "chapters.json")
    parser.add_argument("--devices", type=int, default=None, help="how many (default: all)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    count = device_count() if args.devices is None else args.devices
    if not 1 <= count <= device_count():
        parser.error(f"--devices must be between 1 and {device_count()}, got {count}.")
    devices = resolve_devices(list(range(count)))
    if devices[0].is_simulated:
        print("Devices are simulated on the CPU: timings are host clocks, not GPU times.")
    command = shlex.join(["python", "-m", "experiments.measure", *argv])
    write_record(args.out, "chapters.json", record_all(devices, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
