"""Scatter a batch across devices, and gather the replicas' outputs back.

Two autograd Functions do the tensor work, and each is the other's backward:
scattering a tensor forward means gathering its gradient backward, and the
other way round. Around them, `scatter` and `gather` walk nested Python
structures (tuples, lists, dicts, namedtuples, dataclasses) and rebuild them
once per device (the scatter and gather chapters, ``book/scatter.ipynb`` and
``book/gather.ipynb``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import Function
from torch.nn.utils.rnn import PackedSequence

from learn_parallel import nested
from learn_parallel.devices import Device, DeviceLike, resolve_devices, warn_at_user
from learn_parallel.phases import phase


class Scatter(Function):
    """Split one tensor along ``dim`` and send piece i to torch device ``devices[i]``.

    With ``sizes=None`` the split is ``tensor.chunk(len(devices))``: equal,
    ceil-sized pieces, so a batch can give *fewer* pieces than devices (e.g. 3, 5 or 6 rows on 4).
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
# scatter: flatten the input once, check sizes, split the leaves, rebuild per device
# --------------------------------------------------------------------------


# [scatter]
def scatter(inputs: Any, target_gpus: Sequence[DeviceLike], dim: int = 0) -> Sequence[Any]:
    """Split ``inputs`` into one piece per device (fewer where chunk makes fewer).

    Tensors are chunked along ``dim``; containers are split member by member
    and rebuilt; anything else is given whole to every device. A bare tensor
    gives a tuple of pieces (as torch's `Scatter` does), anything else a list.
    """
    leaves: list[tuple[str, Any]] = []
    build = _flatten(inputs, "inputs", leaves)
    pieces = [build(values) for values in _split_leaves(leaves, resolve_devices(target_gpus), dim)]
    return tuple(pieces) if isinstance(inputs, torch.Tensor) else pieces


Builder = Callable[[Sequence[Any]], Any]


def _flatten(obj: Any, path: str, leaves: list[tuple[str, Any]]) -> Builder:
    """Append the leaves of ``obj`` to ``leaves`` as (path, value); return how to rebuild it.

    The one walk over the structure. A leaf is a tensor, or anything else that
    is shared whole: a number, a string, an empty container, a dataclass with no
    tensor inside. Every other container is rebuilt for each replica, as torch's
    scatter rebuilds it, so a replica that appends to a list it was given
    changes its own copy, not the caller's (an empty list is shared, as in
    torch). The returned function builds one replica's copy of ``obj`` from a
    list of leaf values, in the order of ``leaves``.
    """
    if isinstance(obj, PackedSequence):
        raise TypeError(_PACKED_INPUT.format(path=path))
    members = None if isinstance(obj, torch.Tensor) else nested.members(obj)
    if members:
        first = len(leaves)
        builders = [_flatten(value, path + p, leaves) for p, value in members]
        has_tensor = any(isinstance(value, torch.Tensor) for _, value in leaves[first:])
        if has_tensor or not nested.is_dataclass_instance(obj):
            return lambda values: nested.rebuild(obj, [build(values) for build in builders])
        del leaves[first:]  # torch does not look inside a dataclass: with no tensor, share it
    position = len(leaves)
    leaves.append((path, obj))
    return lambda values: values[position]


def _split_leaves(
    leaves: Sequence[tuple[str, Any]], devices: Sequence[Device], dim: int
) -> list[list[Any]]:
    """Per replica, its leaf values: tensors chunked along ``dim``, the rest shared."""
    _check_sizes(leaves, dim)  # before anything is copied
    targets = [d.torch_device for d in devices]
    columns: list[Any] = [  # columns[i][r]: leaf i in replica r; None until placed
        Scatter.apply(targets, None, dim, value) if _is_batched(value) else None
        for _, value in leaves
    ]
    # Equal sizes make equal numbers of pieces; with nothing split, every device gets a replica.
    count = next((len(c) for c in columns if c is not None), len(devices))
    for i, (_, value) in enumerate(leaves):
        if columns[i] is None and isinstance(value, torch.Tensor):
            # A 0-dim tensor cannot be split: each replica gets a copy on its device (one
            # already there, the tensor itself: .to returns it).
            columns[i] = [value.to(target, non_blocking=True) for target in targets[:count]]
        elif columns[i] is None:
            columns[i] = [value] * count  # the very same object for every replica
    return [list(row) for row in zip(*columns)]


def _is_batched(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _check_sizes(leaves: Sequence[tuple[str, Any]], dim: int) -> None:
    """Raise unless every tensor that gets split has the same size along ``dim``.

    Equal piece counts are not enough: 8 and 7 rows both make 4 pieces on 4
    devices, but the last replica would pair 2 rows of one with 1 row of the other.
    """
    sizes = [(path, value.size(dim)) for path, value in leaves if _is_batched(value)]
    if len({size for _, size in sizes}) > 1:
        listing = ", ".join(f"{path} has {size}" for path, size in sizes)
        raise ValueError(
            f"Cannot scatter tensors of different sizes along dim {dim} in one call "
            f"({listing}): the replicas would pair rows that do not belong together. "
            f"Give every tensor in one call the same size along dim {dim}, or pass "
            f"the odd one as a 0-dim tensor or non-tensor value to share it with "
            f"every replica."
        )


# [scatter]


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


def scatter_kwargs(
    inputs: Sequence[Any],
    kwargs: dict[str, Any] | None,
    target_gpus: Sequence[DeviceLike],
    dim: int = 0,
) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
    """Scatter positional and keyword inputs *together*.

    Splitting them as one list of leaves keeps them aligned: every replica
    that gets a slice of the batch also gets its keyword arguments, and a short
    batch never leaves a replica with keywords but no positional inputs. A size
    mismatch names the arguments (``argument 0``, ``keyword argument 'mask'``); a ``dim`` an
    input lacks raises torch's own ``IndexError`` from ``size``, which names none.
    """
    kwargs = kwargs or {}
    if not inputs and not kwargs:
        return (), ()
    leaves: list[tuple[str, Any]] = []
    build_args = [_flatten(v, f"argument {i}", leaves) for i, v in enumerate(inputs)]
    build_kwargs = {k: _flatten(v, f"keyword argument {k!r}", leaves) for k, v in kwargs.items()}
    per_replica = _split_leaves(leaves, resolve_devices(target_gpus), dim)
    return (
        tuple(tuple(build(values) for build in build_args) for values in per_replica),
        tuple({k: build(values) for k, build in build_kwargs.items()} for values in per_replica),
    )


# --------------------------------------------------------------------------
# gather: the mirror image, from per-device outputs to one structure
# --------------------------------------------------------------------------


def _shapes_agree_but_along(outputs: Sequence[torch.Tensor], dim: int) -> bool:
    """Whether the tensors' shapes are equal in every dimension but ``dim``."""
    first = outputs[0].shape
    if any(o.dim() != len(first) for o in outputs):
        return False
    if not -len(first) <= dim < len(first):
        return True  # an impossible dim: torch's own IndexError says so
    along = dim % len(first)
    return all(
        size == other
        for o in outputs
        for i, (size, other) in enumerate(zip(o.shape, first))
        if i != along
    )


def join_outputs(outputs: Sequence[Any], target: torch.device, dim: int, path: str) -> Any:
    """Join the replicas' outputs, walking their structures in step; ``path`` names the part."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            raise TypeError(f"Cannot gather {path}: some replicas returned a tensor, others not.")
        if all(o.dim() == 0 for o in outputs):
            warn_at_user(
                f"Gathering {path} along dim {dim}, but every replica returned a 0-dim "
                f"tensor (a scalar); returning a vector with one value per replica. "
                f"Reduce it (e.g. .mean()) or return per-sample values instead."
            )
            outputs = [o.unsqueeze(0) for o in outputs]
            dim = 0
        if not _shapes_agree_but_along(outputs, dim):
            # Checked before joining, so that torch's own errors (out of memory, a
            # failed copy) reach the caller unchanged rather than blamed on shapes.
            shapes = ", ".join(str(tuple(o.shape)) for o in outputs)
            raise ValueError(
                f"Cannot gather {path} along dim {dim}: the replicas' shapes {shapes} "
                f"differ in another dimension (or in their number of dimensions)."
            )
        return Gather.apply(target, dim, *outputs)
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
    target = resolve_devices(target_device, output=True).torch_device
    return join_outputs(list(outputs), target, dim, "output")
