"""What DistributedDataParallel's processes send each other, and in which groups.

`ring_all_reduce` spells out one all-reduce with point-to-point messages;
`assign_buckets` groups gradients into the all-reduces; `broadcast_coalesced`
gives every process rank 0's tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def assign_buckets(sizes_in_bytes: Sequence[int], cap_bytes: int) -> list[list[int]]:
    """Group parameter indices into buckets of at most ``cap_bytes``, last parameter first.

    Backward produces gradients roughly in the reverse order of the forward,
    so the buckets are filled from the last parameter to the first. A bucket is
    closed when the next parameter would take it past the cap; a parameter
    larger than the cap gets a bucket of its own.
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index in reversed(range(len(sizes_in_bytes))):
        size = sizes_in_bytes[index]
        if current and current_bytes + size > cap_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
        current.append(index)
        current_bytes += size
    if current:
        buckets.append(current)
    return buckets


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
