"""A test helper run inside each rank: our DDP and torch's on the same models and data.

It runs in the processes `run_ranks` spawns, which import it by this module's name (the
test's folder is on their ``sys.path``, as on the test's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from learn_parallel.lab import ddp_checks
from learn_parallel.lab.ddp_checks import _grads, _snapshot
from learn_parallel.lab.processes import rank_device
from learn_parallel.lab.workloads import Workload, build_model, loss_function, make_batch
from learn_parallel.ladder.distributed import DistributedDataParallel


def torch_agreement_worker(rank: int, world: int, steps: int = 3, seed: int = 0) -> dict:
    """Our DDP and torch's on the same float32 models and data: gradients and parameters.

    Two models: the benchmark's MLP (small) and its small CNN (BatchNorm buffers
    included, so broadcast_buffers is exercised too).
    """
    device = rank_device(dist.get_backend(), rank)
    workloads = {
        "mlp": Workload("mlp", batch=64, width=128, layers=3),
        "cnn": Workload("conv", batch=16, image_size=16, model="small_cnn", classes=10),
    }
    result: dict[str, Any] = {}
    for key, workload in workloads.items():
        x, y = make_batch(workload, workload.batch // world, device, seed=seed + rank)
        for impl in ("ours", "torch"):
            model = build_model(workload, seed).to(device)
            if impl == "ours":
                wrapped: nn.Module = DistributedDataParallel(model, bucket_cap_mb=0.05)
            else:
                ids = [device.index] if device.type == "cuda" else None
                wrapped = torch.nn.parallel.DistributedDataParallel(
                    model, device_ids=ids, bucket_cap_mb=0.05
                )
            optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.05)
            grads, outputs = [], []
            for _ in range(steps):
                out = wrapped(x)
                loss_function(workload, out, y).backward()
                outputs.append(out.detach().cpu().clone())
                grads.append(_grads(model))
                optimizer.step()
                optimizer.zero_grad()
            result[f"{key}:{impl}"] = {
                "outputs": outputs,
                "grads": grads,
                "params": _snapshot(model),
                "buffers": {n: b.detach().cpu().clone() for n, b in model.named_buffers()},
            }
    return result


def suite_with_torch(rank: int, world: int, tasks: Sequence[tuple[str, dict]]) -> dict[str, Any]:
    """`ddp_checks.suite_worker`'s results for ``tasks``, plus ``"torch"``: the agreement above."""
    return {
        **ddp_checks.suite_worker(rank, world, tasks),
        "torch": torch_agreement_worker(rank, world),
    }
