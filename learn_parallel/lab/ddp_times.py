"""torch's DistributedDataParallel with its whole step captured in one CUDA graph.

Set up as torch's CUDA notes require for capturing DDP with NCCL 2.9.6 or later: async
error handling off before the process group starts (`CAPTURE_ENV`), DDP built on a side
stream, at least 11 eager iterations before the capture. The ladder chapter shows it; the
recording times it in one process per GPU, beside plain DDP (the ``ddp_graphs`` row).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from learn_parallel.devices import resolve_devices
from learn_parallel.lab.steps import train_step
from learn_parallel.lab.workloads import Workload, loss_function
from learn_parallel.ladder.graphs import restored_cuda_streams

GRAPH_WARMUP = 11  # "at least 11 DDP-enabled eager iterations before capture"
# Step 1 of the notes, before the process group starts: they name the variable
# NCCL_ASYNC_ERROR_HANDLING, torch's current name for it is TORCH_NCCL_ASYNC_ERROR_HANDLING.
CAPTURE_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_ASYNC_ERROR_HANDLING": "0"}


# [ddp-graph]
def graphed_step(
    model: nn.Module, workload: Workload, x: Tensor, y: Tensor, device: torch.device, lr: float
) -> Callable[[], None]:
    """DDP's forward, loss, backward (bucket all-reduces included) and SGD step, one graph."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # DDP built on a side stream, and warmed up there
        ddp = DistributedDataParallel(model, device_ids=[device.index])
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        for _ in range(GRAPH_WARMUP):
            train_step(ddp, x, y, workload, optimizer)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's pool
    try:
        with restored_cuda_streams(resolve_devices([device])), torch.cuda.graph(graph, stream=side):
            loss_function(workload, ddp(x), y).backward()
            optimizer.step()
    except Exception as error:
        raise RuntimeError(f"CUDA graph capture of the DDP step was refused: {error}") from error
    return graph.replay


# [ddp-graph]
