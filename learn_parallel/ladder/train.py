"""Train a small model with our DistributedDataParallel under torchrun, and check the result.

    torchrun --standalone --nproc-per-node 2 -m learn_parallel.ladder.train [--ddp torch]

Every process learns who it is from torchrun's environment (`launch`), takes its share of
each step's batch as a `DistributedSampler` deals it and times every step. At the end each
prints its step times and its weights' checksum, and rank 0 checks that every rank holds
the same weights and that one process training on the whole batches ends with them too.
``--out DIR`` also writes each rank's numbers to ``DIR/rank<R>.json``, rank 0's verdict to
``summary.json`` and its weights to ``weights.pt``. The distributed chapter runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from learn_parallel.ladder.distributed import DistributedDataParallel
from learn_parallel.ladder.launch import Launch, LaunchError, join_group, pick_device, read_launch

# The largest difference in any weight that still counts as the same training: only the
# order of the additions differs (inside the all-reduce, and over each rank's shorter batch).
# For scale, on a CPU (float32, four layers of width 512, 30 steps): four ranks' averaged
# gradients against one process ended about 2e-8 apart, and 5e-2 apart when the average
# forgot to divide by 4.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
OUT_FEATURES = 4
WHOSE = {"ours": "our DDP", "torch": "torch's DDP"}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrun [...] -m learn_parallel.ladder.train", description=__doc__.split("\n")[0]
    )
    add = parser.add_argument
    add("--ddp", choices=list(WHOSE), default="ours", help="whose DistributedDataParallel")
    add("--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: GPUs if any")
    add("--steps", type=int, default=8, help="optimizer steps (one pass over the data)")
    add("--warmup", type=int, default=1, help="first steps left out of the median step time")
    add("--batch", type=int, default=32, help="rows per step, all ranks together")
    add("--width", type=int, default=32, help="features of the MLP's inputs and hidden layers")
    add("--layers", type=int, default=3, help="linear layers of the MLP")
    add("--dtype", choices=list(TOLERANCE), default="float64")
    add("--bucket-cap-mb", type=float, default=0.002, help="both DDPs' bucket size (MiB)")
    add("--lr", type=float, default=0.1)
    add("--seed", type=int, default=0)
    add("--timeout", type=float, default=120, help="seconds to wait for the other ranks")
    add("--out", type=Path, help="a folder for the ranks' JSON files and rank 0's weights")
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup {args.warmup} must be at least 0 and below --steps {args.steps}")
    return args


def build_model(args: argparse.Namespace, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.width, args.width), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(args.width, OUT_FEATURES))
    return model.to(getattr(torch, args.dtype))


def dataset(args: argparse.Namespace) -> TensorDataset:
    """``batch * steps`` rows, the same on every rank: one pass over them is the training."""
    generator = torch.Generator().manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.batch * args.steps, args.width, generator=generator, dtype=dtype)
    teacher = torch.randn(args.width, OUT_FEATURES, generator=generator, dtype=dtype)
    return TensorDataset(x, torch.tanh(x @ teacher))


def rank_batches(
    data: TensorDataset, world: int, rank: int, batch: int, seed: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's share of every step's ``batch`` rows, as a `DistributedSampler` deals them:
    it shuffles the whole data set by ``seed`` (the same order on every rank) and gives rank
    ``rank`` every ``world``-th index from ``rank`` on. Step k's rows over all the ranks are
    then the order's k-th run of ``batch`` indices: step k of one process (``world`` 1)."""
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=batch // world, sampler=sampler)
    return [(x.to(device), y.to(device)) for x, y in loader]


def wrap(model: nn.Module, ddp: str, device: torch.device, bucket_cap_mb: float) -> nn.Module:
    if ddp == "torch":
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(
            model, device_ids=ids, bucket_cap_mb=bucket_cap_mb
        )
    return DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)


def train(model: nn.Module, batches: Sequence, lr: float, device: torch.device) -> list[float]:
    """One SGD step per batch; each step's wall time in ms (on a GPU: until its kernels end)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def wait() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = []
    wait()
    for x, y in batches:
        start = time.perf_counter()
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        wait()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def flat_weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def one_process(args: argparse.Namespace, device: torch.device) -> nn.Module:
    """The same training without DDP, in one process, on the whole batch of every step."""
    model = build_model(args, args.seed).to(device)
    train(model, rank_batches(dataset(args), 1, 0, args.batch, args.seed, device), args.lr, device)
    return model


def run(args: argparse.Namespace, launch: Launch, device: torch.device, backend: str) -> bool:
    """Train on this rank's share, report, and (rank 0) check; whether the check passed."""
    # Each rank starts from its own random weights: wrapping copies rank 0's to every rank.
    model = build_model(args, args.seed + launch.rank).to(device)
    batches = rank_batches(
        dataset(args), launch.world_size, launch.rank, args.batch, args.seed, device
    )
    times = train(wrap(model, args.ddp, device, args.bucket_cap_mb), batches, args.lr, device)

    mine = flat_weights(model)
    rank0 = mine.clone()
    dist.broadcast(rank0, 0)
    record = {
        **vars(launch),
        "device": str(device),
        "backend": backend,
        "ddp": args.ddp,
        "step_ms": times,
        "median_step_ms": statistics.median(times[args.warmup :]),
        "checksum": mine.double().sum().item(),  # the sum of every weight
        "difference_from_rank_0": (mine - rank0).abs().max().item(),
    }
    print(
        f"rank {launch.rank} of {launch.world_size} (node {launch.node_rank}, local rank "
        f"{launch.local_rank}, {device}, {backend}, {WHOSE[args.ddp]}): median step "
        f"{record['median_step_ms']:.2f} ms over steps {args.warmup + 1}-{args.steps}; "
        f"checksum {record['checksum']!r}",
        flush=True,
    )
    everyone: list[Any] = [None] * launch.world_size
    dist.all_gather_object(everyone, record)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{launch.rank}.json").write_text(json.dumps(record, indent=1))
    if launch.rank != 0:
        return True
    return verdict(args, model, everyone, device)


def verdict(
    args: argparse.Namespace, model: nn.Module, everyone: list[dict], device: torch.device
) -> bool:
    """Rank 0: are all ranks' weights the same, and the same as one process's?"""
    tolerance = TOLERANCE[args.dtype]
    across = max(r["difference_from_rank_0"] for r in everyone)
    alone = (flat_weights(model) - flat_weights(one_process(args, device))).abs().max().item()
    same = across <= tolerance and alone <= tolerance
    print(
        f"rank 0: the {len(everyone)} ranks' weights differ by at most {across:.1e}; one process "
        f"training on the whole batches ends {alone:.1e} away (tolerance {tolerance:.0e}, "
        f"{args.dtype}): {'the same training' if same else 'NOT the same training'}",
        flush=True,
    )
    if args.out:
        summary = {"ranks": everyone, "across_ranks": across, "one_process": alone}
        summary |= {"tolerance": tolerance, "same_training": same, "settings": vars(args)}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.out / "weights.pt")
    return same


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    try:
        launch = read_launch()
        device = pick_device(launch, args.device, torch.cuda.device_count())
        if args.batch % launch.world_size:
            raise LaunchError(
                f"--batch {args.batch} does not split evenly over {launch.world_size} "
                f"processes: use a multiple of {launch.world_size}"
            )
    except LaunchError as error:
        raise SystemExit(f"learn_parallel.ladder.train: {error}") from None
    backend = join_group(launch, device, args.timeout)
    try:
        same = run(args, launch, device, backend)
    finally:
        dist.destroy_process_group()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
