"""Scatter a batch across devices, and gather the replicas' outputs back.

Two autograd Functions do the tensor work, and each is the other's backward:
scattering a tensor forward means gathering its gradient backward, and the
other way round. Around them, `scatter` and `gather` walk nested Python
structures (tuples, lists, dicts, namedtuples, dataclasses) and rebuild them
once per device.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import Function
from torch.nn.utils.rnn import PackedSequence

from learn_parallel import nested
from learn_parallel.devices import Device, DeviceLike, output_torch_device, resolved
from learn_parallel.phases import phase


class Scatter(Function):
    """Split one tensor along ``dim`` and send piece i to torch device ``devices[i]``.

    With ``sizes=None`` the split is ``tensor.chunk(len(devices))``: equal,
    ceil-sized pieces, so a short batch gives *fewer* pieces than devices.
    """

    @staticmethod
    def forward(ctx, devices, sizes, dim, tensor):
        ctx.dim = dim
        ctx.source = tensor.device
        pieces = tensor.chunk(len(devices), dim) if sizes is None else tensor.split(sizes, dim)
        return tuple(piece.to(device, non_blocking=True) for piece, device in zip(pieces, devices))

    @staticmethod
    def backward(ctx, *grads):
        # The pieces' gradients are joined back on the device the input came from.
        return None, None, None, Gather.apply(ctx.source, ctx.dim, *grads)


class Gather(Function):
    """Concatenate per-device tensors along ``dim`` on one target device."""

    @staticmethod
    def forward(ctx, target, dim, *tensors):
        ctx.dim = dim
        ctx.sources = [t.device for t in tensors]
        ctx.sizes = [t.size(dim) for t in tensors]
        # A copy from a GPU to the host may only be read once it has finished, and
        # torch.cat on the CPU would not wait for it: copies to the host block.
        to_host = torch.device(target).type == "cpu"
        return torch.cat([t.to(target, non_blocking=not to_host) for t in tensors], dim)

    @staticmethod
    def backward(ctx, grad):
        # Each slice of the gradient goes back to the device its piece came from.
        with phase("grad scatter"):
            pieces = Scatter.apply(ctx.sources, ctx.sizes, ctx.dim, grad)
        return None, None, *pieces


# --------------------------------------------------------------------------
# scatter: walk the structure, split every tensor, rebuild once per device
# --------------------------------------------------------------------------


class _Shared:
    """A value every replica receives whole (numbers, strings, 0-dim tensors)."""

    def __init__(self, piece_for: Callable[[int], Any], plain: bool = False):
        self.piece_for = piece_for
        self.plain = plain  # the very same object for every replica, no per-device copy


def _split(obj: Any, devices: Sequence[Device], dim: int, path: str) -> list[Any] | _Shared:
    """Per-device pieces of ``obj``, or a `_Shared` value for things not split."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            # A scalar cannot be split; every replica gets its own copy of it.
            return _Shared(lambda i: obj.to(devices[i].torch_device, non_blocking=True))
        return list(Scatter.apply([d.torch_device for d in devices], None, dim, obj))
    if isinstance(obj, PackedSequence):
        raise TypeError(_PACKED_INPUT.format(path=path))
    members = nested.members(obj)
    if not members:  # not a container, or an empty one
        return _Shared(lambda i: obj, plain=True)

    parts = [(p, _split(value, devices, dim, path + p)) for p, value in members]
    split = [(p, part) for p, part in parts if not isinstance(part, _Shared)]
    if not split:
        if all(part.plain for _, part in parts):
            return _Shared(lambda i: obj, plain=True)
        return _Shared(lambda i: nested.rebuild(obj, [part.piece_for(i) for _, part in parts]))

    counts = {len(part) for _, part in split}
    if len(counts) > 1:
        listing = ", ".join(f"{path}{p} into {len(part)}" for p, part in split)
        raise ValueError(
            f"Cannot scatter {path}: its tensors split into different numbers of "
            f"pieces ({listing}) over {len(devices)} devices along dim {dim}, so "
            f"some replicas would get only part of the data. Give every tensor in "
            f"one call the same size along dim {dim}, or pass the odd one as a "
            f"0-dim tensor or non-tensor value to share it with every replica."
        )
    count = counts.pop()
    return [
        nested.rebuild(
            obj, [part.piece_for(i) if isinstance(part, _Shared) else part[i] for _, part in parts]
        )
        for i in range(count)
    ]


# A PackedSequence is a namedtuple of flat time-major data, so splitting it field
# by field would hand each replica time steps instead of sequences.
_PACKED_INPUT = (
    "Cannot scatter {path}: it is a PackedSequence, whose data is ordered by time "
    "step, not by sequence, so splitting it along the batch would give each replica "
    "time steps of every sequence instead of whole sequences. Pass the padded tensor "
    "and the lengths instead (torch.nn.utils.rnn.pad_packed_sequence gives both) and "
    "pack inside forward with pack_padded_sequence(x, lengths.cpu(), batch_first=..., "
    "enforce_sorted=False)."
)


def _check_sizes(named: Sequence[tuple[str, Any]], dim: int) -> None:
    """Raise unless every tensor that gets split has the same size along ``dim``.

    Equal piece counts are not enough: 8 and 7 rows both make 4 pieces on 4
    devices, but the last replica would pair 2 rows of one with 1 row of the other.
    """
    sizes = [
        (path, t.size(dim))
        for name, value in named
        for path, t in nested.tensors(value, name)
        if t.dim() > 0
    ]
    if len({size for _, size in sizes}) > 1:
        listing = ", ".join(f"{path} has {size}" for path, size in sizes)
        raise ValueError(
            f"Cannot scatter tensors of different sizes along dim {dim} in one call "
            f"({listing}): the replicas would pair rows that do not belong together. "
            f"Give every tensor in one call the same size along dim {dim}, or pass "
            f"the odd one as a 0-dim tensor or non-tensor value to share it with "
            f"every replica."
        )


def scatter(inputs: Any, target_gpus: Sequence[DeviceLike], dim: int = 0) -> list[Any]:
    """Split ``inputs`` into one piece per device (fewer when the batch is short).

    Tensors are chunked along ``dim``; containers are split member by member
    and rebuilt; anything else is given whole to every device.
    """
    devices = resolved(target_gpus)
    pieces = _split(inputs, devices, dim, "inputs")
    _check_sizes([("inputs", inputs)], dim)
    if isinstance(pieces, _Shared):
        return [pieces.piece_for(i) for i in range(len(devices))]
    return pieces


def scatter_kwargs(
    inputs: Sequence[Any],
    kwargs: dict[str, Any] | None,
    target_gpus: Sequence[DeviceLike],
    dim: int = 0,
) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
    """Scatter positional and keyword inputs *together*.

    Splitting them as one structure keeps them aligned: every replica that
    gets a slice of the batch also gets its keyword arguments, and a short
    batch never leaves a replica with keywords but no positional inputs.
    """
    kwargs = dict(kwargs or {})
    both = _split((tuple(inputs), kwargs), resolved(target_gpus), dim, "inputs")
    _check_sizes(
        [(f"argument {i}", v) for i, v in enumerate(inputs)]
        + [(f"keyword argument {k!r}", v) for k, v in kwargs.items()],
        dim,
    )
    if isinstance(both, _Shared):
        if not inputs and not kwargs:
            return (), ()
        both = [both.piece_for(i) for i in range(len(target_gpus))]
    return tuple(args for args, _ in both), tuple(kw for _, kw in both)


# --------------------------------------------------------------------------
# gather: the mirror image, from per-device outputs to one structure
# --------------------------------------------------------------------------


def join_outputs(outputs: Sequence[Any], target: torch.device, dim: int, path: str) -> Any:
    """Join the replicas' outputs, walking their structures in step; ``path`` names the part."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            raise TypeError(f"Cannot gather {path}: some replicas returned a tensor, others not.")
        if all(o.dim() == 0 for o in outputs):
            warnings.warn(
                f"Gathering {path} along dim {dim}, but every replica returned a 0-dim "
                f"tensor (a scalar); returning a vector with one value per replica. "
                f"Reduce it (e.g. .mean()) or return per-sample values instead.",
                stacklevel=4,
            )
            outputs = [o.unsqueeze(0) for o in outputs]
            dim = 0
        try:
            return Gather.apply(target, dim, *outputs)
        except RuntimeError as error:
            shapes = ", ".join(str(tuple(o.shape)) for o in outputs)
            raise ValueError(
                f"Cannot gather {path} along dim {dim}: the replicas' shapes {shapes} "
                f"differ in another dimension. ({error})"
            ) from None
    if first is None:
        if any(o is not None for o in outputs):
            raise TypeError(f"Cannot gather {path}: some replicas returned None, others not.")
        return None
    if isinstance(first, PackedSequence):
        raise TypeError(
            f"Cannot gather {path}: the replicas returned PackedSequences, which are "
            f"ordered by time step, so joining them field by field would mix up the "
            f"sequences. Return padded tensors instead "
            f"(torch.nn.utils.rnn.pad_packed_sequence(output, batch_first=...))."
        )
    members = nested.members(first)
    if members is None or (not members and not isinstance(first, tuple | list | dict)):
        # Not a container: nothing to join, so keep every replica's value.
        return list(outputs)
    nested.check_alike(outputs, path)
    if isinstance(first, dict):  # match dict members by key, not by position
        per_member = zip(*[[o[key] for key in first] for o in outputs])
    else:
        per_member = zip(*[[value for _, value in nested.members(o)] for o in outputs])
    joined = [
        join_outputs(list(values), target, dim, path + p)
        for (p, _), values in zip(members, per_member)
    ]
    return nested.rebuild(first, joined)


def gather(outputs: Sequence[Any], target_device: DeviceLike, dim: int = 0) -> Any:
    """Join the replicas' outputs on ``target_device`` (``-1`` or ``"cpu"`` for the host)."""
    if not outputs:
        raise ValueError("gather() needs at least one replica output.")
    return join_outputs(list(outputs), output_torch_device(target_device), dim, "output")
