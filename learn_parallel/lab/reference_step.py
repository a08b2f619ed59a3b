"""The ladder's reference row: the top rung's GPU work with the least host work, written out.

One thread drives every device. Each device keeps a replica, its own SGD and its gradients
in one flat tensor; after warm-up steps on side streams, its step is captured as two CUDA
graphs (zeroed gradients, forward, loss and backward; the SGD step). A step replays every
device's first graph, sums the flat gradients with one ``torch.cuda.nccl.all_reduce``,
replays the SGD graphs and broadcasts replica 0's buffers (BatchNorm statistics), as DDP's
next forward would. Nothing is checked and nothing copied: it reads the batch it captured.
A timing reference for the ``step_graphs`` rung, not a tool: CUDA GPUs, one parameter
dtype, no fallback when a capture is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from learn_parallel.devices import Device
from learn_parallel.lab.workloads import Workload, build_model, loss_function, make_batch
from learn_parallel.ladder.graphs import THREAD_LOCAL
from learn_parallel.ladder.kept_replicas import group_by_dtype, move_into_flat
from learn_parallel.variants import split_batch

WARMUP = 3  # eager steps before the capture: the optimizer's and the libraries' setup


# [reference-step]
def reference_step(workload: Workload, devices: list[Device], lr: float, seed: int) -> Callable:
    """A step of ``workload`` over ``devices`` as the fewest host calls can run it."""
    n, ids = len(devices), [d.index for d in devices]
    model = build_model(workload, seed).to(devices[0].torch_device)
    replicas = [model, *(copy.deepcopy(model).to(d.torch_device) for d in devices[1:])]
    x, y = make_batch(workload, workload.batch, devices[0].torch_device, seed)
    pieces = [
        tuple(t.to(d.torch_device) for t in piece)
        for piece, d in zip(split_batch((x, y), n), devices)
    ]
    grads = [_flat_gradients(replica) for replica in replicas]
    sgd = [torch.optim.SGD(replica.parameters(), lr=lr) for replica in replicas]
    buffers = [list(replica.buffers()) for replica in replicas]
    flat_buffers = [  # per dtype, one flat tensor per replica
        [move_into_flat([b[i] for i in positions], b[0].device) for b in buffers]
        for positions in group_by_dtype(buffers[0]).values()
    ]

    def forward_backward(k: int) -> None:
        grads[k].zero_()
        inputs, target = pieces[k]
        (loss_function(workload, replicas[k](inputs), target) / n).backward()

    streams = [torch.cuda.Stream(i) for i in ids]
    for k, stream in enumerate(streams):
        stream.wait_stream(torch.cuda.current_stream(ids[k]))
    for _ in range(WARMUP):
        for k, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                forward_backward(k)
        torch.cuda.nccl.all_reduce(grads, streams=streams)
        for k, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                sgd[k].step()
    for i in ids:
        torch.cuda.synchronize(i)
    first, second = [], []
    for k, stream in enumerate(streams):
        first.append(torch.cuda.CUDAGraph())
        second.append(torch.cuda.CUDAGraph())
        with torch.cuda.graph(first[k], stream=stream, **THREAD_LOCAL):
            forward_backward(k)
        with torch.cuda.graph(second[k], first[k].pool(), stream, **THREAD_LOCAL):
            sgd[k].step()

    def step() -> None:
        for graph in first:
            graph.replay()
        torch.cuda.nccl.all_reduce(grads)
        for graph in second:
            graph.replay()
        for flats in flat_buffers:
            torch.cuda.nccl.broadcast(flats, root=0)

    for flats in flat_buffers:  # the eager steps left each replica its own statistics
        torch.cuda.nccl.broadcast(flats, root=0)
    return step


# [reference-step]


def _flat_gradients(replica: torch.nn.Module) -> torch.Tensor:
    """One flat tensor for ``replica``'s gradients, each ``.grad`` a view of it."""
    params = list(replica.parameters())
    if len({p.dtype for p in params}) != 1:
        raise ValueError("the reference step keeps one flat gradient: one parameter dtype only")
    flat = torch.zeros(
        sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
    )
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat
