"""TupleParallel: DataParallel for batches that are already split, one per device.

`DataParallel` takes one batch and splits it. `TupleParallel` takes a tuple of
N batches, N being the number of devices, and gives batch i to the replica on
device i. Nothing is split inside the model and nothing is gathered: the result
is a tuple of N outputs, each left on the device that computed it, so a loss
can be computed where the output already is.

The split happens earlier, in the DataLoader, with `PerDeviceCollate`. Each
batch can be any structure (tensors in tuples, lists, dicts, namedtuples, or a
custom object with a ``.to()`` method), which is why the split is left to the
user's data pipeline instead of to a generic scatter (``book/tuple_parallel.ipynb``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence
from torch.utils.data import default_collate

from learn_parallel import nested
from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.variants.options import check_on_device


def move_to_device(value: Any, device: Device) -> Any:
    """A copy of ``value`` with every tensor moved to ``device``, asynchronously.

    Tuples (namedtuples included, even with a ``.to()``), lists, dicts, and
    dataclasses without a ``.to()`` are rebuilt around the moved tensors; a
    ``PackedSequence`` (the one tuple moved by its own ``.to()``) and any other object
    with a ``.to()`` method (a dataclass included) is moved by calling
    ``value.to(device, non_blocking=True)``, which must return a moved copy: an
    object moved in place (an ``nn.Module``) and passed as a keyword argument
    would reach every replica as one object, left on the last device. Anything
    else is returned as is. The copy is non-blocking: from pinned memory
    (DataLoader's ``pin_memory=True``) the host queues it and goes on. The work
    queued next on the device's current stream, such as the replica's forward,
    waits for it: the copy does not overlap with that compute.
    """
    # A custom batch type (even a dataclass) knows best how to move itself; so does a
    # PackedSequence, a namedtuple whose batch_sizes must stay on the CPU.
    is_container = isinstance(value, tuple | list | dict | type)
    if isinstance(value, torch.Tensor | PackedSequence) or (
        not is_container and callable(getattr(value, "to", None))
    ):
        return value.to(device.torch_device, non_blocking=True)
    members = nested.members(value)
    if not members:
        return value
    return nested.rebuild(value, [move_to_device(member, device) for _, member in members])


class TupleParallel(DataParallel):
    """Run ``module`` on N per-device batches at once; return N outputs, left in place.

    DataParallel with two steps changed: `scatter` gives batch i to device i instead
    of splitting one batch, and `gather` leaves the outputs where they are, as a
    tuple. ``device_ids`` means what it means for DataParallel; ``dim`` splits
    nothing here (both steps that read it are replaced) and only reaches the
    `PerDeviceCollate` that `collate_fn()` returns. There is no
    ``output_device``, since nothing is gathered. With ``transfer=True`` (the
    default) batch i is moved to device i; with ``transfer=False`` batch i must
    already sit there, which is checked for tensors (custom objects cannot be
    inspected), on GPUs and simulated devices alike. In both modes the keyword
    arguments, shared by every replica, are moved to every device.
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        dim: int = 0,
        *,
        transfer: bool = True,
    ) -> None:
        super().__init__(module, device_ids, dim=dim)
        self.transfer = transfer

    def extra_repr(self) -> str:
        simulated = " (simulated on the CPU)" if self.src_device.is_simulated else ""
        devices = ", ".join(map(str, self.devices))
        return f"devices=[{devices}]{simulated}, dim={self.dim}, transfer={self.transfer}"

    def forward(self, batches: Sequence[Any], **kwargs: Any) -> tuple[Any, ...]:
        """``module(batches[i], **kwargs)`` on device i, for every i; returns the N outputs."""
        output = super().forward(batches, **kwargs)
        # One device calls the module itself and skips gather: a tuple all the same.
        return (output,) if len(self.devices) == 1 else output

    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any], device_ids: Sequence[DeviceLike]
    ) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
        """Per-replica (args, kwargs): batch i on device i, the kwargs on every device."""
        (batches,) = inputs  # forward's one positional argument
        devices = resolve_devices(device_ids)
        n = len(devices)
        if not isinstance(batches, tuple | list) or nested.is_namedtuple(batches):
            raise TypeError(
                f"TupleParallel expects a tuple of {n} batches, one per device, but got a "
                f"{type(batches).__name__}. Split the batch first (PerDeviceCollate({n}) "
                f"as the DataLoader's collate_fn does it), or use DataParallel, which "
                f"splits one batch for you."
            )
        if len(batches) != n:
            raise ValueError(
                f"TupleParallel got {len(batches)} batches but runs on {n} devices "
                f"([{', '.join(map(str, devices))}]); pass exactly one batch per "
                f"device, e.g. with collate_fn=PerDeviceCollate({n}) in the DataLoader."
            )
        if not self.transfer:
            for i, (batch, device) in enumerate(zip(batches, devices)):
                check_on_device(
                    batch,
                    device,
                    f"TupleParallel(transfer=False): batches[{i}]",
                    f"Batch {i} must already sit on device_ids[{i}]: move it there "
                    f"(.to('{device.torch_device}')), or leave transfer=True so that "
                    f"TupleParallel moves it.",
                )
        else:
            batches = [move_to_device(b, d) for b, d in zip(batches, devices)]
        # Keyword arguments are shared, so every replica needs its own copy on its device.
        kwargs_tup = tuple(move_to_device(kwargs, d) for d in devices)
        return tuple((batch,) for batch in batches), kwargs_tup

    def gather(self, outputs: Sequence[Any], output_device: DeviceLike) -> tuple[Any, ...]:
        """Nothing is joined: output i stays on device i, in a tuple."""
        return tuple(outputs)

    def collate_fn(self, collate: Callable[[list], Any] = default_collate) -> PerDeviceCollate:
        """A DataLoader ``collate_fn`` that gives this TupleParallel its N batches."""
        return PerDeviceCollate(len(self.devices), dim=self.dim, collate=collate)


# [per-device-collate]
def split_batch(batch: Any, num_pieces: int, dim: int = 0) -> tuple[Any, ...]:
    """Split every tensor in ``batch`` into ``num_pieces`` along ``dim``; one structure each.

    Uses ``tensor_split``, which always gives exactly ``num_pieces`` pieces (sizes
    differ by at most one), where ``chunk`` gives fewer for some sizes (9 rows in 8
    chunks of 2 makes 5). Non-tensor values and 0-dim tensors go whole to every piece.
    """
    sizes = _batch_sizes(batch, dim)
    if not sizes:
        raise ValueError(
            f"Cannot split the batch into {num_pieces} pieces: it holds no tensor "
            f"with a dimension {dim} to split."
        )
    if len(set(sizes)) > 1:
        raise ValueError(
            f"Cannot split the batch into {num_pieces} pieces: its tensors have different "
            f"sizes along dim {dim} ({sorted(set(sizes))}), so the pieces would not line up."
        )
    size = sizes[0]
    if size < num_pieces:
        raise ValueError(
            f"A batch of {size} cannot be split into {num_pieces} pieces, one per device: "
            f"each device needs at least one item. Use a batch size of at least "
            f"{num_pieces}, and drop_last=True in the DataLoader so the last batch is full."
        )
    return tuple(_piece(batch, i, num_pieces, dim) for i in range(num_pieces))


def _batch_sizes(value: Any, dim: int) -> list[int]:
    return [t.size(dim) for _, t in nested.tensors(value) if t.dim() > 0]


def _piece(value: Any, i: int, n: int, dim: int) -> Any:
    return nested.map_tensors(lambda t: t.tensor_split(n, dim)[i] if t.dim() > 0 else t, value)


class PerDeviceCollate:
    """A DataLoader ``collate_fn`` that stacks the items, then splits them per device.

    Items are stacked by ``collate`` (``default_collate`` unless given), then cut
    by `split_batch` into ``num_devices`` pieces: the tuple TupleParallel takes.
    Tuple items such as ``(x, y)`` give per-device tuples ``(x_i, y_i)``. The
    result is a tuple of tensors, which DataLoader's ``pin_memory=True`` pins
    piece by piece. A class, not a closure, so DataLoader workers can pickle it.
    """

    def __init__(
        self, num_devices: int, dim: int = 0, collate: Callable[[list], Any] = default_collate
    ) -> None:
        if num_devices < 1:
            raise ValueError(f"num_devices must be at least 1, got {num_devices}.")
        self.num_devices = num_devices
        self.dim = dim
        self.collate = collate

    def __call__(self, items: list[Any]) -> tuple[Any, ...]:
        batch = self.collate(items)
        if type(items[0]) is tuple and type(batch) is list:
            batch = tuple(batch)  # default_collate turns tuple items into lists
        return split_batch(batch, self.num_devices, self.dim)


# [per-device-collate]
