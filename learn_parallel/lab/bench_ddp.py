"""One DistributedDataParallel process of the benchmark (started by torchrun, never by hand).

``python -m learn_parallel bench`` launches this module once per device
count with ``python -m torch.distributed.run --nproc_per_node=N``. Every
process owns one device (a GPU with NCCL, or the CPU with gloo), trains on
its share of the global batch, and rank 0 writes the step times to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from learn_parallel.devices import device_type
from learn_parallel.lab.bench import train_step
from learn_parallel.lab.processes import rank_step_times, share
from learn_parallel.lab.workloads import Workload, build_model, make_batch


def _time_workload(
    workload: Workload, device: torch.device, config: dict, rank: int, world: int
) -> list[float]:
    model = build_model(workload, config["seed"]).to(device)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    optimizer = torch.optim.SGD(ddp.parameters(), lr=config["lr"])
    rows = share(workload.batch, world, rank)
    if rows == 0:
        raise ValueError(f"global batch {workload.batch} is too small for {world} processes")
    x, y = make_batch(workload, rows, device, seed=config["seed"] + rank)
    return rank_step_times(
        lambda: train_step(ddp, x, y, workload, optimizer),
        device,
        config["warmup"],
        config["steps"],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="JSON written by the bench")
    parser.add_argument("--result", required=True, help="where rank 0 writes its JSON")
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device_type() == "cuda":  # LEARN_PARALLEL_SIMULATE=1 keeps DDP on the CPU too
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")

    results = []
    for job in config["jobs"]:
        workload = Workload(**job["workload"])
        torch.backends.cudnn.benchmark = bool(job["cudnn_benchmark"])
        entry = {"key": job["key"], "status": "ok", "note": ""}
        try:
            times = _time_workload(workload, device, config, rank, world)
            entry.update(step_ms_all=times, step_ms=statistics.median(times))
        except Exception as error:  # noqa: BLE001 - report it, go on with the next job
            entry.update(status="failed", note=f"{type(error).__name__}: {error}"[:500])
        results.append(entry)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    if rank == 0:
        Path(args.result).write_text(json.dumps(results))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
