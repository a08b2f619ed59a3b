"""Answers as plain data: what the student's kernel may hand the grader, and nothing else.

`encode` runs in the kernel: tensors (with their device and ``requires_grad``), numbers,
strings, ``None``, devices, dtypes, and lists, tuples, sets and dicts of them. `decode` runs
in the grader on what ``torch.load(weights_only=True)`` read back, and checks every node's
exact type again: the kernel is not trusted to have used `encode`.
"""

from __future__ import annotations

from typing import Any

import torch


class UngradableAnswer(AssertionError):
    pass


_SCALARS = (int, float, bool, str, complex, type(None))
_DEVICE_TYPES = {"cpu", "cuda", "sim", "meta"}


def encode(value: Any) -> Any:
    """``value`` as plain data (in the kernel); raises UngradableAnswer for anything else."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    for base in (bool, int, float, str):  # numpy scalars, enums: their plain value
        if isinstance(value, base):
            return base(value)
    if isinstance(value, torch.Tensor):
        plain = value.detach().as_subclass(torch.Tensor)
        record = {"device": str(plain.device), "requires_grad": bool(value.requires_grad)}
        if plain.device.type == "meta":
            return {"__meta__": [list(plain.shape), str(plain.dtype)], **record}
        return {"__tensor__": plain.to("cpu", copy=True).contiguous(), **record}
    if isinstance(value, torch.device):
        return {"__device__": str(value)}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):  # torch.Size and named tuples too: their items
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, set | frozenset):
        return {"__set__": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    raise UngradableAnswer(
        f"the answer returned a {kind.__name__}, which the grader cannot compare: return "
        "tensors, numbers, strings, lists, tuples, sets or dicts"
    )


def decode(data: Any) -> Any:
    """Plain data back into values (in the grader), refusing anything else."""
    kind = type(data)
    if kind in _SCALARS:
        return data
    if kind is list:
        return [decode(v) for v in data]
    if kind is dict and len(data) >= 1:
        tag = next(iter(data))
        if tag == "__tensor__" and type(data[tag]) is torch.Tensor:
            tensor = data[tag].to(_device(data["device"]))
            return tensor.requires_grad_() if data["requires_grad"] is True else tensor
        if tag == "__meta__":
            shape, dtype = data[tag]
            return torch.empty([int(s) for s in shape], dtype=_dtype(dtype), device="meta")
        if tag == "__device__":
            return _device(data[tag])
        if tag == "__dtype__":
            return _dtype(data[tag])
        if tag == "__tuple__":
            return tuple(decode(v) for v in data[tag])
        if tag == "__set__":
            return {decode(v) for v in data[tag]}
        if tag == "__dict__":
            return {decode(k): decode(v) for k, v in data[tag]}
    raise UngradableAnswer(f"the recorded answer holds a {kind.__name__} the grader refuses")


def _device(name: Any) -> torch.device:
    device = torch.device(str(name))
    if device.type not in _DEVICE_TYPES:
        raise UngradableAnswer(f"unknown device {name!r} in the recorded answer")
    if device.type == "sim":
        from learn_parallel import sim

        sim.enable()
    return device


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise UngradableAnswer(f"unknown dtype {name!r} in the recorded answer")
    return dtype
