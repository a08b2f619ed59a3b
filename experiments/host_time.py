"""How long the Python thread spends in one DataParallel forward (host time).

    python -m experiments.host_time [--json]

No chapter plots it: it is the evidence for what device bookkeeping (parsing ids,
walking parameters) adds to every step (``tests/core/test_resolve_once.py`` counts
the same on simulated devices). ``book/data/record_gpu_runs.sh`` (part ``host_time``)
prints its JSON to the part's log; run it from two checkouts to compare them. How it
times: `measure`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import learn_parallel
from experiments.counting import counting
from learn_parallel import devices as device_module
from learn_parallel.lab.timeline import describe_hardware
from learn_parallel.lab.workloads import CONV_MODELS, Workload, build_model, make_batch


def host_times_ms(
    forward: Callable[[], Any], devices: Sequence[Any], warmup: int, repeats: int
) -> list[float]:
    """Host time of each of ``repeats`` calls, every one started with the devices idle."""
    for _ in range(warmup):
        forward()
    times = []
    for _ in range(repeats):
        device_module.synchronize(devices)
        start = time.perf_counter()
        output = forward()
        times.append((time.perf_counter() - start) * 1e3)
        del output  # the graph goes before the next forward
        device_module.synchronize(devices)
    return times


def measure(workload: Workload, warmup: int = 3, repeats: int = 20) -> dict[str, Any]:
    """Median host time of one DataParallel forward, and device ids parsed per forward.

    On GPUs, ``DataParallel.forward`` returns once its copies and kernels are queued,
    so the time the calling thread spends inside it is the wrapper's own overhead plus
    kernel launches. Each timed forward starts with every device idle and is timed on
    the host clock until it returns. On simulated devices the forward runs on the CPU
    before it returns, so the host time there includes the compute; use a small
    ``--batch`` and ``--image-size`` to see the overhead.
    """
    dp = learn_parallel.DataParallel(build_model(workload))
    source = dp.devices[0].torch_device
    dp.module.to(source)
    x, _ = make_batch(workload, workload.batch, source)
    times = host_times_ms(lambda: dp(x), dp.devices, warmup, repeats)
    with counting() as calls:
        dp(x)
    return {
        "package": str(learn_parallel.__file__),
        "hardware": describe_hardware(dp.devices).label(),
        "workload": workload.describe(),
        "devices": len(dp.devices),
        "host_ms_median": statistics.median(times),
        "host_ms_min": min(times),
        "host_ms_all": times,
        "ids_parsed_per_forward": calls[0],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.host_time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batch", type=int, default=512, help="global batch (default 512)")
    parser.add_argument(
        "--image-size", type=int, default=128, help="image height and width (default 128)"
    )
    parser.add_argument(
        "--model",
        choices=CONV_MODELS,
        default="auto",
        help="resnet18 (torchvision), small_cnn, or auto: resnet18 when torchvision imports",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed forwards first")
    parser.add_argument("--repeats", type=int, default=20, help="timed forwards (median)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    workload = Workload("conv", args.batch, image_size=args.image_size, model=args.model)
    result = measure(workload.resolved(), args.warmup, args.repeats)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{result['workload']} on {result['hardware']} (host clock)\n"
        f"  package: {result['package']}\n"
        f"  host time of one forward: median {result['host_ms_median']:.3f} ms, "
        f"min {result['host_ms_min']:.3f} ms over {len(result['host_ms_all'])}\n"
        f"  device ids parsed per forward: {result['ids_parsed_per_forward']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
