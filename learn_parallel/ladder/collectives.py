"""What data-parallel replicas send each other, and in which groups.

Between processes (the distributed chapter): `ring_all_reduce` spells out one
all-reduce with point-to-point messages, `broadcast_coalesced` gives every process
rank 0's tensors (which gradients travel together: ``buckets.plan_buckets``).
Inside one process that drives every device (the ladder chapter):
`all_reduce_across` and `broadcast_across` take one tensor per device; on CUDA
GPUs each is one NCCL group call, elsewhere the same ring, spelled out with copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum ``tensor`` across all processes, in place, by passing chunks around a ring.

    The tensor is cut into one chunk per process. In the *reduce-scatter* half,
    each of ``world - 1`` steps every rank sends one chunk to its right
    neighbour and adds the chunk arriving from its left one; afterwards rank r
    holds the complete sum of chunk (r + 1) % world. In the *all-gather* half
    the finished chunks travel once more around the ring, copied instead of
    added. Every rank sends 2 (world - 1) / world times the tensor's size in
    total, however many processes there are: that is why rings scale.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    right, left = (rank + 1) % world, (rank - 1) % world
    if group is not None:  # point-to-point calls take global ranks
        right, left = dist.get_global_rank(group, right), dist.get_global_rank(group, left)
    chunks = tensor.view(-1).tensor_split(world)  # views: writing them writes ``tensor``
    for half in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            if half == "reduce-scatter":
                send, receive = (rank - step) % world, (rank - step - 1) % world
            else:
                send, receive = (rank + 1 - step) % world, (rank - step) % world
            incoming = torch.empty_like(chunks[receive])
            # Send and receive as one batch (NCCL could deadlock if every rank
            # first blocked in its send). Every rank computes the same chunk
            # sizes, so an empty chunk is skipped by its sender and receiver alike.
            messages = []
            if chunks[send].numel():
                messages.append(dist.P2POp(dist.isend, chunks[send], right, group))
            if incoming.numel():
                messages.append(dist.P2POp(dist.irecv, incoming, left, group))
            for request in dist.batch_isend_irecv(messages) if messages else []:
                request.wait()
            if half == "reduce-scatter":
                chunks[receive].add_(incoming)
            else:
                chunks[receive].copy_(incoming)
    return tensor


def broadcast_coalesced(tensors: Sequence[torch.Tensor], src: int = 0, group: Any = None) -> None:
    """Overwrite ``tensors`` in every process with rank ``src``'s values, one message per dtype."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for same in by_dtype.values():
        flat = torch.cat([t.detach().reshape(-1) for t in same])
        dist.broadcast(flat, dist.get_global_rank(group, src) if group else src, group=group)
        for t, piece in zip(same, flat.split([t.numel() for t in same])):
            t.detach().copy_(piece.view_as(t))


# [in-process]
def all_reduce_across(
    tensors: Sequence[torch.Tensor], streams: Sequence[torch.cuda.Stream] | None = None
) -> None:
    """Sum ``tensors``, one per device, in place: afterwards every one holds the total.

    One process drives every device here, so there are no ranks to meet: on CUDA
    GPUs this is one ``torch.cuda.nccl.all_reduce`` (a group call that enqueues one
    NCCL kernel per device, on ``streams`` or each device's current stream);
    elsewhere it is `ring_across`, the same ring with copies between devices.
    """
    if len(tensors) < 2:
        return
    if _nccl_can_take(tensors):
        torch.cuda.nccl.all_reduce(tensors, streams=streams)
        return
    with _on_streams(streams):
        ring_across(tensors)


def ring_across(tensors: Sequence[torch.Tensor]) -> None:
    """`ring_all_reduce` inside one process: the ring's steps are copies between devices.

    Device ``r`` plays rank ``r``; in each step every device sends one chunk to
    the next device round the ring. All of a step's chunks are copied before any
    is added, as the ranks exchange theirs at once. Every chunk is summed once, in
    the reduce-scatter half, so every device ends with bit-identical values.
    """
    n = len(tensors)
    chunks = [t.detach().view(-1).tensor_split(n) for t in tensors]
    for half in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            if half == "reduce-scatter":
                sent = [(rank - step) % n for rank in range(n)]
            else:
                sent = [(rank + 1 - step) % n for rank in range(n)]
            arriving = [
                chunks[rank][c].to(tensors[(rank + 1) % n].device) for rank, c in enumerate(sent)
            ]
            for rank, (c, chunk) in enumerate(zip(sent, arriving)):
                target = chunks[(rank + 1) % n][c]
                if half == "reduce-scatter":
                    target.add_(chunk)
                else:
                    target.copy_(chunk)


def broadcast_across(
    tensors: Sequence[torch.Tensor],
    root: int = 0,
    streams: Sequence[torch.cuda.Stream] | None = None,
) -> None:
    """Overwrite every tensor in ``tensors`` (one per device) with ``tensors[root]``'s values."""
    if len(tensors) < 2:
        return
    if _nccl_can_take(tensors):
        torch.cuda.nccl.broadcast(tensors, root=root, streams=streams)
        return
    with _on_streams(streams), torch.no_grad():
        for i, tensor in enumerate(tensors):
            if i != root:
                tensor.copy_(tensors[root])


# [in-process]


def _nccl_can_take(tensors: Sequence[torch.Tensor]) -> bool:
    """CUDA tensors, dense and contiguous, one per GPU, and a torch built with NCCL."""
    if not hasattr(torch._C, "_nccl_all_reduce"):
        return False
    return torch.cuda.nccl.is_available(tensors)


def _on_streams(streams: Sequence[torch.cuda.Stream] | None) -> ExitStack:
    """Make each of ``streams`` current on its device (nothing to do for None)."""
    stack = ExitStack()
    for stream in streams or ():
        stack.enter_context(torch.cuda.stream(stream))
    return stack
