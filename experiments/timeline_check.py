"""Do recorded timelines agree with measured step times? The raw numbers, per step.

    python -m experiments.timeline_check --out DIR [--devices 2] [--steps 5]

For the MLP and ResNet-18 of the benchmark (`learn_parallel.lab.workloads`) on
``--devices`` devices: `check_workload` compares measured step times with recorded
timelines, and `clock_alignment` checks that the GPU clock and the host clock agree.
Everything goes to ``DIR/timeline_check.json``, which the data_parallel and performance
chapters read (``book/data/record_gpu_runs.sh``, part ``timeline``, runs it on 2 GPUs);
``tests/gpu/test_gpu_timeline.py`` checks the same on any GPU machine.
"""

from __future__ import annotations

import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from experiments import driver_parser, first_devices, write_record
from learn_parallel import DataParallel
from learn_parallel.devices import Device
from learn_parallel.lab import provenance
from learn_parallel.lab.steps import make_step as make_training_step
from learn_parallel.lab.timeline import describe_hardware, step_spans
from learn_parallel.lab.timing import Recorder, step_times_ms
from learn_parallel.lab.workloads import Workload, standard_workloads


def workloads_for(devices: Sequence[Device]) -> dict[str, Workload]:
    """The MLP and ResNet-18 at GPU size (`workloads.SIZES`), CPU ones on simulated devices."""
    table = standard_workloads("gpu" if devices[0].type == "cuda" else "cpu")
    return {"mlp": table["mlp"], "resnet18": table["conv"]}


def make_step(workload: Workload, devices: Sequence[Device]):
    """One DataParallel training step of ``workload``, with its phases marked."""
    step, dp, _ = make_training_step(workload, devices, DataParallel)
    return step, dp.devices


def check_workload(workload: Workload, devices: Sequence[Device], steps: int = 5) -> dict[str, Any]:
    """Measured step times, and the step spans of timelines recorded with and without syncs.

    Steps are timed the way the benchmark does (every device idle at each step's start
    and end), then the same steps are recorded twice: with the devices synchronised
    between recorded steps (what `Recorder.steps` does by default) and without (what
    the recorder did before). For each it keeps `step_spans`: the span a timeline plot
    shows, when the first device row began after the host row began, and when the
    devices had finished the step before.
    """
    step, devs = make_step(workload, devices)
    measured = step_times_ms(step, devs, warmup=3, steps=max(steps, 7))
    result: dict[str, Any] = {
        "workload": workload.resolved().describe(),
        "measured_ms": measured,
        "measured_median_ms": statistics.median(measured),
    }
    for synchronized in (True, False):
        with Recorder(devices=devs) as recorder:
            for _ in recorder.steps(steps, synchronize=synchronized):
                step()
        timeline = recorder.timeline()
        spans = step_spans(timeline)
        key = "synchronized" if synchronized else "unsynchronized"
        result[key] = {
            "step_spans": spans,
            "median_span_ms": statistics.median(s["span"] for s in spans[1:] or spans),
            "timeline": timeline.to_dict(),
        }
    return result


def clock_alignment(devices: Sequence[Device], gap_s: float = 0.2) -> list[dict[str, float]]:
    """Per GPU: host-clock vs event-clock distance between two idle-GPU reference events.

    Two reference events taken on idle GPUs some time apart must be as far apart on the
    GPU clock as on the host clock.
    """
    rows = []
    for d in devices:
        if d.type != "cuda":
            continue
        marks = []
        for _ in range(2):
            torch.cuda.synchronize(d.index)
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(d.index))
            marks.append((time.perf_counter(), event))
            time.sleep(gap_s)
        torch.cuda.synchronize(d.index)
        host_ms = (marks[1][0] - marks[0][0]) * 1e3
        event_ms = marks[0][1].elapsed_time(marks[1][1])
        rows.append({"device": str(d), "host_ms": host_ms, "event_ms": event_ms})
    return rows


def _print_spans(name: str, data: dict[str, Any]) -> None:
    print(f"  {name}: median span {data['median_span_ms']:.2f} ms")
    for s in data["step_spans"]:
        cols = [f"step {s['step']}", f"span {s['span']:.2f}"]
        for key in ("device_span", "device_lag", "host_start", "first_device_start"):
            if key in s:
                cols.append(f"{key} {s[key]:.2f}")
        if s.get("previous_device_end") is not None:
            cols.append(f"previous_device_end {s['previous_device_end']:.2f}")
        print("    " + ", ".join(cols))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.timeline_check", __doc__, "timeline_check.json", devices=2)
    parser.add_argument("--steps", type=int, default=5, help="recorded steps per timeline")
    parser.add_argument("--workloads", default="mlp,resnet18", help="comma-separated")
    args = parser.parse_args(argv)
    devices = first_devices(args.devices)
    table = workloads_for(devices)
    report: dict[str, Any] = {
        "hardware": describe_hardware(devices).__dict__,
        **provenance.run_metadata(
            shlex.join(["python", "-m", "experiments.timeline_check", *argv])
        ),
        "clock_alignment": clock_alignment(devices),
        "workloads": {},
    }
    print("clock alignment (two idle-GPU events 200 ms apart):", report["clock_alignment"])
    for name in args.workloads.split(","):
        torch.backends.cudnn.benchmark = False
        result = check_workload(table[name], devices, args.steps)
        report["workloads"][name] = result
        print(f"{result['workload']}: measured median {result['measured_median_ms']:.2f} ms")
        _print_spans("synchronized", result["synchronized"])
        _print_spans("unsynchronized", result["unsynchronized"])
    write_record(args.out, "timeline_check.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
