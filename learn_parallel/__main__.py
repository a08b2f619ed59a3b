"""Command line: ``python -m learn_parallel demo`` and ``python -m learn_parallel bench``."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import device_type
from learn_parallel.lab import bench


class _Reporter(nn.Module):
    """A small MLP that notes, per call, which rows it saw and where it ran."""

    def __init__(self, features: int, log: list) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 1))
        self.log = log  # shared by the replicas: their __dict__ is a copy of this one

    def forward(self, x: torch.Tensor, row_ids: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        out = self.net(x)
        first, last = int(row_ids[0]), int(row_ids[-1])
        where = threading.current_thread().name
        self.log.append((first, last, x.device, where, time.perf_counter() - start))
        return out


def demo(batch: int, devices: int | None, features: int = 16) -> None:
    torch.manual_seed(0)
    log: list = []
    model = _Reporter(features, log)
    device_ids = None if devices is None else list(range(devices))
    dp = DataParallel(model, device_ids=device_ids)
    dp.to(dp.src_device.torch_device)
    x = torch.randn(batch, features, device=dp.src_device.torch_device)
    rows = torch.arange(batch, device=x.device)

    print(f"device type: {device_type()}")
    print(dp)
    # One untimed step first: the first call starts the worker threads and lets PyTorch
    # set up its kernels and autograd, which takes far longer than the step itself.
    dp(x, row_ids=rows).sum().backward()
    log.clear()
    model.zero_grad()
    out = dp(x, row_ids=rows)
    out.sum().backward()

    pieces = f"{len(log)} piece{'' if len(log) == 1 else 's'}"
    print(f"\nA batch of {batch} rows was split into {pieces} (after one warm-up step):")
    for first, last, device, where, seconds in sorted(log, key=lambda r: r[0]):
        print(
            f"  rows {first:>3}-{last:<3} -> {where} (tensors on {device}, {seconds * 1e3:.2f} ms)"
        )
    single = model(x, rows)
    same = torch.allclose(out, single, atol=1e-6)
    print(f"\nGathered output: {tuple(out.shape)} on {out.device}; equal to one device: {same}")
    if dp.src_device.is_simulated:
        print("(Devices are simulated on the CPU: timings are host clocks, not GPU times.)")


def _positive(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m learn_parallel", description=bench.plain(__doc__)
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run_demo = commands.add_parser(
        "demo", help="run one DataParallel step and show how the batch was split"
    )
    run_demo.add_argument(
        "--batch", type=_positive, default=10, help="rows in the batch (default 10)"
    )
    run_demo.add_argument(
        "--devices", type=_positive, default=None, help="number of devices (default: all)"
    )
    run_bench = commands.add_parser(
        "bench",
        help="time one device, learn_parallel.DataParallel, torch.nn.DataParallel and DDP "
        "side by side; write JSON and plots",
    )
    bench.build_parser(run_bench)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "demo":
        problem = bench.argument_error(argparse.Namespace(devices=[args.devices or 1]))
        if problem:
            run_demo.error(problem)
        demo(args.batch, args.devices)
    elif args.command == "bench":
        problem = bench.argument_error(args)
        if problem:
            run_bench.error(problem)
        return bench.run_cli(args, argv[argv.index("bench") + 1 :])
    return 0


if __name__ == "__main__":
    sys.exit(main())
