"""Plausible wrong answers to the exercises of book/ladder.ipynb (see libtorch_replicate.py)."""

import torch


def _forward_order(sizes, cap):
    buckets, current, size = [], [], 0
    for i, s in enumerate(sizes):
        current.append(i)
        size += s
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def _close_when_over(sizes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        size += sizes[i]
        if size > cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def _drop_the_rest(sizes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        size += sizes[i]
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets


def _rebind(originals, replica, flat):
    for p, o in zip(replica, originals):
        p.data = o.detach().to(p.device, copy=True)


def _rebind_flat(originals, replica, flat):
    flat = torch.cat([o.reshape(-1) for o in originals]).to(flat.device)  # noqa: F841


def _copy_with_grad(originals, replica, flat):
    for p, o in zip(replica, originals):
        p.copy_(o)


WRONG_ANSWERS = {
    "bucket-plan": [(_forward_order,), (_close_when_over,), (_drop_the_rest,)],
    "refresh-in-place": [(_rebind,), (_rebind_flat,), (_copy_with_grad,)],
}
