"""Our DDP beside torch's under torchrun, on this host's GPU counts: ``torchrun.json``.

    python -m experiments.torchrun_times --out DIR [--counts 1,2,4] [--repeats 5]

The distributed chapter's section "On a cluster" shows its table. For every GPU count, in
``--repeats`` interleaved rounds, it runs `launch.torchrun_command` (one node) once with our
DDP and once with torch's on the same float32 MLP and data (`SETTINGS`), and keeps every
rank's step times and rank 0's check against one process. A step is as slow as its slowest
rank: a run's number is the median, over its timed steps, of the slowest rank's time.
``book/data/record_gpu_runs.sh`` (part ``torchrun``) runs it.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from experiments import driver_parser, write_record
from learn_parallel.ladder import launch

RECORD_FILE = "torchrun.json"
# 480 rows split evenly over 1, 2, 3, 4, 5, 6 and 8 GPUs.
SETTINGS = ["--dtype", "float32", "--width", "2048", "--layers", "4", "--batch", "480"]
SETTINGS += ["--steps", "50", "--warmup", "10", "--bucket-cap-mb", "25", "--lr", "0.01"]
QUICK = ["--dtype", "float32", "--width", "64", "--batch", "48", "--steps", "12", "--warmup", "2"]


def default_counts(gpus: int) -> list[int]:
    """1, 2, 4, ... below ``gpus``, and ``gpus`` itself."""
    return sorted({2**k for k in range(gpus.bit_length()) if 2**k < gpus} | {gpus})


def run_once(
    gpus: int, ddp: str, settings: list[str], device: str, timeout_s: float
) -> dict[str, Any]:
    """One torchrun job: every rank's step times and rank 0's verdict (or why it failed)."""
    with tempfile.TemporaryDirectory() as folder:
        args = [*settings, "--ddp", ddp, "--device", device, "--out", folder]
        command = launch.torchrun_command(gpus, args=args)
        try:
            done = subprocess.run(
                launch.runnable(command), capture_output=True, text=True, timeout=timeout_s
            )
            returncode, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as error:
            returncode, output = None, f"timed out after {timeout_s:.0f} s: {error.output or ''}"
        return summarize(gpus, ddp, Path(folder), returncode, output)


def summarize(
    gpus: int, ddp: str, folder: Path, returncode: int | None, output: str
) -> dict[str, Any]:
    """A run's entry: per-rank step times, the slowest rank per timed step, the verdict."""
    files = [folder / f"rank{rank}.json" for rank in range(gpus)]
    ranks = [json.loads(path.read_text()) for path in files if path.is_file()]
    summary_file = folder / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    entry: dict[str, Any] = {"gpus": gpus, "ddp": ddp, "returncode": returncode}
    if returncode != 0 or len(ranks) != gpus or not summary:
        return entry | {"status": "failed", "output_tail": output[-3000:]}
    per_step = list(zip(*(r["step_ms"] for r in ranks)))
    slowest = [max(step) for step in per_step[summary["settings"]["warmup"] :]]
    return entry | {
        "status": "ok",
        "devices": [r["device"] for r in ranks],
        "step_ms_per_rank": [r["step_ms"] for r in ranks],
        "slowest_step_ms": slowest,
        "median_ms": statistics.median(slowest),
        "same_training": summary["same_training"],
        "across_ranks": summary["across_ranks"],
        "one_process": summary["one_process"],
        "tolerance": summary["tolerance"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.torchrun_times", __doc__, RECORD_FILE)
    parser.add_argument("--counts", help="GPU counts, e.g. 1,2,4 (default: 1, 2, 4, ... all)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per count")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per torchrun job")
    parser.add_argument("--quick", action="store_true", help="a small model (CPU, trials)")
    args = parser.parse_args(argv)
    gpus = torch.cuda.device_count()
    if args.device == "cuda" and gpus == 0:
        parser.error("no GPU is visible: this records NCCL runs, one process per GPU")
    counts = [int(c) for c in args.counts.split(",")] if args.counts else default_counts(gpus)
    settings = QUICK if args.quick else SETTINGS
    runs = []
    for round_ in range(args.repeats):
        for count in counts:
            for ddp in ("ours", "torch"):
                entry = run_once(count, ddp, settings, args.device, args.timeout)
                runs.append(entry | {"round": round_})
                median = f"{entry['median_ms']:.2f} ms" if entry["status"] == "ok" else "failed"
                print(f"round {round_}, {count} GPU(s), {ddp}: {median}", flush=True)
    report = {
        "label": f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "CPU (gloo)",
        "settings": {"train_args": settings, "repeats": args.repeats},
        "runs": runs,
        "command": shlex.join(["python", "-m", "experiments.torchrun_times", *argv]),
    }
    write_record(args.out, RECORD_FILE, report)
    return 0 if all(r["status"] == "ok" and r["same_training"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
