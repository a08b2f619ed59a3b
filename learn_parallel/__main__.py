"""``python -m learn_parallel demo``: one DataParallel forward and backward pass (no
optimizer step), and how the batch was split.

``python -m learn_parallel chapters OUT`` copies the book's chapters into OUT (a clone's
``book/``, or the copies a pip install carries). The benchmark runs from a clone of the
repository: ``python -m experiments.bench``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import device_count_error, device_type


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
    # One untimed forward and backward pass first: the first call starts the worker threads
    # and lets PyTorch set up its kernels and autograd, which takes far longer than the pass.
    dp(x, row_ids=rows).sum().backward()
    log.clear()
    model.zero_grad()
    out = dp(x, row_ids=rows)
    out.sum().backward()

    pieces = f"{len(log)} piece{'' if len(log) == 1 else 's'}"
    print(f"\nA batch of {batch} rows was split into {pieces} (after one warm-up step):")
    for first, last, device, where, seconds in sorted(log, key=lambda r: r[0]):
        span = f"rows {first:>3}-{last:<3}" if last > first else f"row  {first:>3}    "
        print(f"  {span} -> {where} (tensors on {device}, {seconds * 1e3:.2f} ms)")
    single = model(x, rows)
    same = torch.allclose(out, single, atol=1e-6)
    print(f"\nGathered output: {tuple(out.shape)} on {out.device}; equal to one device: {same}")
    if dp.src_device.is_simulated:
        print("(Devices are simulated on the CPU: timings are host clocks, not GPU times.)")


def copy_chapters(out: Path) -> list[Path]:
    """Copy every chapter notebook into ``out`` (made if missing); refuse to overwrite one."""
    from learn_parallel.classroom import files  # where a clone or an install keeps them

    chapters = sorted(files.book().glob("*.ipynb"))
    there = [out / c.name for c in chapters if (out / c.name).exists()]
    if there:
        raise FileExistsError(
            f"{there[0]} already exists (and {len(there) - 1} more chapters); "
            "choose a new folder, or move those away first"
        )
    out.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy(chapter, out / chapter.name)) for chapter in chapters]


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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        print(BENCH_MOVED, file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(
        prog="python -m learn_parallel",
        description="A first look at learn_parallel: one DataParallel forward and backward "
        "pass and how its batch was split (demo), or the book's chapters copied into a "
        "folder of yours (chapters).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_demo = commands.add_parser(
        "demo",
        help="run one DataParallel forward and backward pass and show how the batch was split",
        description="Run one learn_parallel.DataParallel forward and backward pass, with no "
        "optimizer step (after one warm-up pass), and show which device and worker thread "
        "took which rows of the batch.",
    )
    run_demo.add_argument(
        "--batch", type=_positive, default=10, help="rows in the batch (default 10)"
    )
    run_demo.add_argument(
        "--devices", type=_positive, default=None, help="number of devices (default: all)"
    )
    chapters = commands.add_parser(
        "chapters",
        help="copy the book's chapters into a folder (or print where they are)",
        description="Copy the book's chapter notebooks into OUT, to open in Jupyter or "
        "JupyterLab: a clone's book/ (stored with outputs), or the copies a pip install "
        "carries (without outputs). Without OUT, print the folder they are copied from.",
    )
    chapters.add_argument(
        "out", type=Path, nargs="?", metavar="OUT", help="folder to copy into (made if missing)"
    )
    args = parser.parse_args(argv)
    if args.command == "chapters":
        return _chapters(chapters, args.out)
    try:
        problem = device_count_error(args.devices or 1)
    except ValueError as error:  # a bad LEARN_PARALLEL_SIMULATED_DEVICES
        run_demo.error(str(error))
    if problem:
        run_demo.error(f"argument --devices: {problem}")
    demo(args.batch, args.devices)
    return 0


def _chapters(parser: argparse.ArgumentParser, out: Path | None) -> int:
    from learn_parallel.classroom import files

    try:
        if out is None:
            print(files.book())
            return 0
        copied = copy_chapters(out)
    except (FileNotFoundError, FileExistsError) as error:
        parser.error(str(error))
    first = next((c for c in copied if c.name == "intro.ipynb"), copied[0])
    print(f"Copied {len(copied)} chapters into {out}; the first: jupyter lab {first}")
    return 0


BENCH_MOVED = (
    "The benchmark runs from a clone of the repository: python -m experiments.bench --help "
    "(it is not part of the installed package)."
)


if __name__ == "__main__":
    sys.exit(main())
