"""The chain benchmark on every device count from 2 up: ``chain_bench.json``.

    python -m experiments.chain_bench --out DIR [--quick]

Feeds the options chapter (its recorded plot of netA -> netB kept scattered vs gathered
and scattered again, read back by `learn_parallel.lab.measure.load_recorded`):
``book/data/record_gpu_runs.sh`` (part ``chain``) runs it on GPUs. ``--quick`` uses a
tiny model, for a smoke test on simulated devices (host clocks, not GPU times).
"""

from __future__ import annotations

import platform
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict

import torch

from experiments import driver_parser, write_record
from learn_parallel.devices import device_count, resolve_devices
from learn_parallel.lab import provenance
from learn_parallel.lab.chain_bench import Config, measure
from learn_parallel.lab.measurement import synced_clock
from learn_parallel.lab.timeline import describe_hardware

# A 1 GiB float32 feature map: big enough that moving it costs more than computing it.
FULL = Config(batch=256, image_size=64, features=256, classes=10, warmup=3, steps=15)
QUICK = Config(batch=8, image_size=8, features=8, classes=3, warmup=1, steps=3)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = driver_parser("experiments.chain_bench", __doc__, "chain_bench.json")
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps (smoke test)")
    parser.add_argument("--max-devices", type=int, default=None, help="default: all devices")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per measurement")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per measurement")
    args = parser.parse_args(argv)

    config = QUICK if args.quick else FULL
    overrides = {"warmup": args.warmup, "steps": args.steps}
    config = Config(**{**asdict(config), **{k: v for k, v in overrides.items() if v is not None}})
    top = min(args.max_devices or device_count(), device_count())
    if top < 2:
        print(
            f"chain_bench needs at least 2 devices, found {top}. Without GPUs, set "
            f"LEARN_PARALLEL_SIMULATED_DEVICES=4.",
            file=sys.stderr,
        )
        return 2
    devices = resolve_devices(list(range(top)))
    if devices[0].is_simulated:
        print("Devices are simulated on the CPU: timings are host clocks, not GPU times.")
    print(f"feature map between the nets: {config.feature_map_mb:.2f} MB per step")

    results = [measure(n, config) for n in range(2, top + 1)]
    print(f"{'devices':>7} | {'scattered ms':>12} | {'regathered ms':>13} | {'speedup':>7}")
    for r in results:
        print(
            f"{r['devices']:>7} | {r['scattered_median_ms']:>12.2f} | "
            f"{r['regathered_median_ms']:>13.2f} | {r['speedup']:>6.2f}x"
        )

    record = {
        "benchmark": "chain_bench",
        "what": "median ms of one training step (forward, backward, SGD step) of netA -> netB",
        "clock": synced_clock(devices),
        **provenance.run_metadata(shlex.join(["python", "-m", "experiments.chain_bench", *argv])),
        "python_version": platform.python_version(),
        "hardware": describe_hardware(devices).to_dict(),
        "config": {
            **asdict(config),
            "feature_map_mb": config.feature_map_mb,
            "quick": args.quick,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        },
        "results": results,
    }
    write_record(args.out, "chain_bench.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
