"""The customisable options: keep outputs per device, take inputs already split.

Two wrapped networks in a row normally meet on one device: the first gathers
its output there, the second scatters it out again. `OptionsDataParallel`, a
DataParallel whose scatter and gather steps take options, skips that round trip
(``gather_to_one_device=False``, ``inputs_are_scattered=True``,
``except_keywords``); `gather_per_device` gathers per-device results later, in
batch order (the options chapter, ``book/options.ipynb``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from learn_parallel import nested
from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import Device, DeviceLike, resolve_devices
from learn_parallel.scatter_gather import join_outputs


class PerDevice(tuple):
    """One value per device, in ``device_ids`` order: what the options keep apart.

    A tuple in every way (it prints as one); the type only marks it, so that
    `gather_per_device` joins these and leaves alone any tuple or list of
    whole-batch tensors that the model itself returned. Wrap pieces of your own
    in it (``PerDevice(pieces)``) to have `gather_per_device` join them.
    """

    __slots__ = ()


def check_on_device(value: Any, device: Device, path: str, fix: str) -> None:
    """Raise unless every tensor in ``value`` sits on ``device``; ``fix`` ends the message.

    Simulated devices are torch devices of their own (``sim:N``), so this
    checks the index there exactly as on GPUs.
    """
    if isinstance(value, torch.Tensor):
        if value.device != device.torch_device:
            raise RuntimeError(
                f"{path} is on {value.device}, but it goes to {device.describe()}, whose "
                f"tensors live on {device.torch_device}. {fix}"
            )
        return
    if isinstance(value, PackedSequence):  # its batch_sizes live on the CPU by design
        for name in ("data", "sorted_indices", "unsorted_indices"):
            if (tensor := getattr(value, name)) is not None:
                check_on_device(tensor, device, f"{path}.{name}", fix)
        return
    for suffix, member in nested.members(value) or []:
        check_on_device(member, device, path + suffix, fix)


def take_scattered(
    inputs: Sequence[Any], kwargs: dict[str, Any] | None, devices: Sequence[Device]
) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
    """The ``scatter`` step for inputs that are already split: no copies, only checks.

    Every positional and keyword argument must be a tuple or list of per-device
    values, all of the same length k (at most one per device). Replica i gets
    the i-th value of each, and every tensor in it must already sit on
    ``devices[i]``. A k below the number of devices is what a short batch gives
    (see DataParallel's forward): only the first k replicas run.
    """
    kwargs = kwargs or {}
    named = [(f"argument {i}", v) for i, v in enumerate(inputs)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    if not named:
        return (), ()
    for name, value in named:
        if not isinstance(value, tuple | list) or nested.is_namedtuple(value):
            raise TypeError(
                f"inputs_are_scattered=True expects every argument to be a tuple or list "
                f"with one value per device, but {name} is a {type(value).__name__}. Pass "
                f"the per-device tuple that a DataParallel with gather_to_one_device=False "
                f"returns, or leave inputs_are_scattered off to split the batch here."
            )
    lengths = {len(value) for _, value in named}
    if len(lengths) > 1:
        listing = ", ".join(f"{name} has {len(value)}" for name, value in named)
        raise ValueError(
            f"inputs_are_scattered=True needs the same number of per-device values in "
            f"every argument, but {listing}. Give every argument one value per device."
        )
    count = lengths.pop()
    if not 1 <= count <= len(devices):
        raise ValueError(
            f"inputs_are_scattered=True got {count} per-device values per argument, but "
            f"this DataParallel has {len(devices)} devices "
            f"([{', '.join(map(str, devices))}]). Give one value per device, in device_ids "
            f"order (fewer only when the batch was too short to fill every device)."
        )
    for i, device in enumerate(devices[:count]):
        for name, value in named:
            check_on_device(
                value[i],
                device,
                f"inputs_are_scattered=True: {name}[{i}]",
                f"Piece {i} of every argument must already sit on device_ids[{i}]: move it "
                f"there (.to('{device.torch_device}')), or produce it with a DataParallel "
                f"that has the same device_ids in the same order.",
            )
    per_replica_args = tuple(tuple(value[i] for value in inputs) for i in range(count))
    per_replica_kwargs = tuple({k: value[i] for k, value in kwargs.items()} for i in range(count))
    return per_replica_args, per_replica_kwargs


def gather_except(
    outputs: Sequence[Any],
    target_device: DeviceLike,
    dim: int = 0,
    except_keywords: Iterable[Any] = (),
    gather_to_one_device: bool = True,
) -> Any:
    """`gather`, except that some outputs stay on their devices as per-device tuples.

    With ``gather_to_one_device=False`` that is every output; otherwise it is the
    subtrees under dict keys listed in ``except_keywords``, at any depth. A tensor
    kept apart becomes a `PerDevice` tuple, one tensor per replica, in replica order.
    """
    if not outputs:
        raise ValueError("gather_except() needs at least one replica output.")
    target = resolve_devices(target_device, output=True).torch_device
    keys = frozenset(except_keywords)
    return _gather_or_keep(list(outputs), target, dim, keys, not gather_to_one_device, "output")


def _gather_or_keep(
    outputs: list[Any], target: torch.device, dim: int, keys: frozenset, keep: bool, path: str
) -> Any:
    first = outputs[0]
    if not keep and not _mentions(first, keys):
        return join_outputs(outputs, target, dim, path)  # nothing kept apart below: plain gather
    members = nested.members(first)
    if members is None:  # a leaf: a tensor, None, or any other value
        return None if all(o is None for o in outputs) else PerDevice(outputs)
    if not members:
        return first  # an empty container has nothing to keep apart
    nested.check_alike(outputs, path, "collect")
    if isinstance(first, dict):  # match dict members by key; a listed key keeps its subtree
        columns = [[o[key] for o in outputs] for key in first]
        keeps = [keep or key in keys for key in first]
    else:
        columns = [list(c) for c in zip(*[[v for _, v in nested.members(o)] for o in outputs])]
        keeps = [keep] * len(columns)
    joined = [
        _gather_or_keep(column, target, dim, keys, k, path + p)
        for (p, _), column, k in zip(members, columns, keeps)
    ]
    return nested.rebuild(first, joined)


def _mentions(obj: Any, keys: frozenset) -> bool:
    """Whether any dict inside ``obj`` (at any depth) has one of ``keys``."""
    if not keys or isinstance(obj, torch.Tensor):
        return False
    if isinstance(obj, dict) and not keys.isdisjoint(obj.keys()):
        return True
    return any(_mentions(value, keys) for _, value in nested.members(obj) or [])


def gather_per_device(per_device: Any, target_device: DeviceLike, dim: int = 0) -> Any:
    """Gather per-device tuples back into whole-batch tensors, in batch order.

    The inverse of ``gather_to_one_device=False`` and ``except_keywords``: every
    `PerDevice` tuple made only of tensors is concatenated on ``target_device`` in
    the order given, which is the order of ``device_ids`` and so the order of the
    pieces of the batch; any other tuple or list (one the model returned) is left
    as it is. Nothing is ever sorted by device id: with ``device_ids=[2, 0, 1]``
    the piece on device 2 comes first, as it did in the input. Gradients flow
    back to each device's piece.
    """
    target = resolve_devices(target_device, output=True).torch_device
    return _gather_tuples(per_device, target, dim, "per_device")


def _gather_tuples(obj: Any, target: torch.device, dim: int, path: str) -> Any:
    if isinstance(obj, PerDevice) and obj and all(isinstance(v, torch.Tensor) for v in obj):
        return join_outputs(list(obj), target, dim, path)
    members = nested.members(obj)
    if not members:
        return obj  # a leaf, or an empty container
    return nested.rebuild(obj, [_gather_tuples(v, target, dim, path + p) for p, v in members])


# [options-data-parallel]
class OptionsDataParallel(DataParallel):
    """DataParallel with four keyword options; their defaults give PyTorch's behaviour.

    - ``gather_to_one_device=False``: nothing is gathered; every tensor leaf of
      the output becomes a tuple of per-device tensors, in ``device_ids`` order.
    - ``inputs_are_scattered=True``: nothing is scattered; every argument is a
      tuple (or list) of per-device values and replica i gets the i-th of each.
    - ``except_keywords=[...]``: gather everything but the subtrees under these
      dict keys (at any depth), which stay per-device tuples.
    - ``sort_and_gather=True``: gather every output in batch order. Replica i
      always holds piece i of the batch, whatever the device ids, so replica
      order *is* batch order and nothing is sorted by device id (which is what
      misaligned the tutorial's version). The option refuses the two above,
      which keep outputs apart; `gather_per_device` gathers those later.
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
        *,
        gather_to_one_device: bool = True,
        inputs_are_scattered: bool = False,
        except_keywords: Iterable[Any] = (),
        sort_and_gather: bool = False,
    ) -> None:
        if isinstance(except_keywords, str):
            # A lone string would otherwise be read as a set of one-letter keys.
            raise TypeError(
                f"except_keywords must be a list of dict keys, got the string "
                f"{except_keywords!r}; write except_keywords=[{except_keywords!r}]."
            )
        super().__init__(module, device_ids, output_device, dim)
        self.gather_to_one_device = gather_to_one_device
        self.inputs_are_scattered = inputs_are_scattered
        self.except_keywords = frozenset(except_keywords)
        self.sort_and_gather = sort_and_gather
        self._keeps_apart()  # refuses sort_and_gather beside an option that keeps outputs apart

    def _keeps_apart(self) -> bool:
        """True when some outputs stay per-device tuples instead of being gathered."""
        keeps_apart = not self.gather_to_one_device or bool(self.except_keywords)
        if keeps_apart and self.sort_and_gather:
            raise ValueError(
                "sort_and_gather=True gathers every output to one device, but "
                "gather_to_one_device=False or except_keywords ask to keep outputs "
                "per device. Use one or the other; to gather per-device tuples later, "
                "call learn_parallel.gather_per_device()."
            )
        return keeps_apart

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        output = super().forward(*inputs, **kwargs)
        if len(self.devices) == 1 and self._keeps_apart():
            # One device skips gather; per-device tuples are promised all the same.
            return self.gather([output], self.output_device)
        return output

    # [options-data-parallel]

    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any], device_ids: Sequence[DeviceLike]
    ) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
        if self.inputs_are_scattered:
            return take_scattered(inputs, kwargs, resolve_devices(device_ids))
        return super().scatter(inputs, kwargs, device_ids)

    def gather(self, outputs: Sequence[Any], output_device: DeviceLike) -> Any:
        # sort_and_gather needs no sorting: replica i holds piece i of the batch, so
        # replica order is batch order. The options are read here, where they act,
        # so one switched after __init__ is refused too, never silently overruled.
        if self._keeps_apart():
            return gather_except(
                outputs, output_device, self.dim, self.except_keywords, self.gather_to_one_device
            )
        return super().gather(outputs, output_device)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if not self.gather_to_one_device:
            text += ", gather_to_one_device=False"
        if self.inputs_are_scattered:
            text += ", inputs_are_scattered=True"
        if self.except_keywords:
            text += f", except_keywords=[{', '.join(sorted(map(repr, self.except_keywords)))}]"
        if self.sort_and_gather:
            text += ", sort_and_gather=True"
        return text
