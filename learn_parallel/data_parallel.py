"""DataParallel, assembled: scatter -> replicate -> parallel_apply -> gather.

`DataParallel` has PyTorch's constructor and the same four overridable steps,
so ``torch.nn.DataParallel`` can be swapped for ``learn_parallel.DataParallel``
with nothing else changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from learn_parallel.clone_replicate import replicate_strategy
from learn_parallel.devices import (
    Device,
    DeviceLike,
    check_balance,
    resolve_device_ids,
    resolved,
    to_device,
)
from learn_parallel.options import gather_except, take_scattered
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.phases import phase
from learn_parallel.replicate import replicate, wrong_device_error
from learn_parallel.scatter_gather import gather, scatter_kwargs


# [source-device-check]
def check_on_source_device(module: nn.Module, source: Device) -> None:
    """Raise unless every parameter and buffer of ``module`` is on ``source``.

    Replicas are copied from the source device, so a tensor anywhere else would
    either be missed or break the copy halfway. The message names the tensor.
    `replicate` makes the same check while it collects the tensors to copy, so
    a step on several devices walks the module only once.
    """
    for kind, named in (("parameter", module.named_parameters), ("buffer", module.named_buffers)):
        for name, tensor in named():
            if tensor.device != source.torch_device:
                raise wrong_device_error(kind, name, tensor.device, source)


# [source-device-check]


def wrapper_devices(module: nn.Module, device_ids: Sequence[DeviceLike] | None) -> list[Device]:
    """The checked devices of a wrapper around ``module`` (DataParallel, TupleParallel).

    Warns when the GPUs are unbalanced; with a single device there is nothing to
    split, so the module is moved there and will simply be called on it.
    """
    devices = resolve_device_ids(device_ids)
    check_balance(devices)
    if len(devices) == 1:
        _refuse_meta_tensors(module, devices[0])  # .to() would fail on them with no name
        target = devices[0].torch_device
        tensors = [*module.parameters(), *module.buffers()]
        if any(t.device != target for t in tensors):  # already there: nothing to move
            module.to(target)
    return devices


def _refuse_meta_tensors(module: nn.Module, device: Device) -> None:
    for kind, named in (("parameter", module.named_parameters), ("buffer", module.named_buffers)):
        for name, tensor in named():
            if tensor.is_meta:
                raise ValueError(
                    f"The module's {kind} {name!r} is on the meta device (a shape without "
                    f"data), so it cannot be moved to {device}. Give it memory first: "
                    f"module.to_empty(device=...) and initialise it, or load a state_dict."
                )


# [data-parallel-init]
class DataParallel(nn.Module):
    """Split each batch across devices, run a replica of ``module`` on each, join the outputs.

    ``device_ids=None`` uses every GPU or, on a machine without one, every
    simulated device. ``output_device`` (default ``device_ids[0]``; ``"cpu"``
    allowed) is where outputs are gathered. ``dim`` is the batch dimension.

    The keyword options after ``dim`` (defaults: PyTorch's behaviour) let two
    wrapped networks pass data without a round trip through one device:

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
    - ``replicate="clone"``: replicate the libtorch way (`clone_replicate`)
      instead of through `Broadcast` (``"broadcast"``, the default).
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
        gather_to_one_device: bool = True,
        inputs_are_scattered: bool = False,
        except_keywords: Iterable[Any] = (),
        sort_and_gather: bool = False,
        replicate: str = "broadcast",
    ) -> None:
        super().__init__()
        self.replicate_strategy, self._replicate = replicate, replicate_strategy(replicate)
        self.module = module
        self.dim = dim
        self._set_options(
            gather_to_one_device, inputs_are_scattered, except_keywords, sort_and_gather
        )
        # Resolved once, here: every step passes these Device values down unchanged.
        self.devices: list[Device] = wrapper_devices(module, device_ids)
        self.device_ids: list[int] = [d.index for d in self.devices]
        self._device_of_id = dict(zip(self.device_ids, self.devices))
        self.src_device: Device = self.devices[0]
        self.output_device: Device = (
            self.src_device if output_device is None else to_device(output_device, allow_cpu=True)
        )

    # [data-parallel-init]

    def extra_repr(self) -> str:
        simulated = " (simulated on the CPU)" if self.src_device.is_simulated else ""
        devices = ", ".join(map(str, self.devices))
        text = f"devices=[{devices}]{simulated}, output_device={self.output_device}, dim={self.dim}"
        if not self.gather_to_one_device:
            text += ", gather_to_one_device=False"
        if self.inputs_are_scattered:
            text += ", inputs_are_scattered=True"
        if self.except_keywords:
            text += f", except_keywords=[{', '.join(sorted(map(repr, self.except_keywords)))}]"
        if self.sort_and_gather:
            text += ", sort_and_gather=True"
        return text

    # [data-parallel-forward]
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with record_function("learn_parallel.DataParallel.forward"):
            if len(self.devices) == 1:  # on several devices, replicate checks as it copies
                check_on_source_device(self.module, self.src_device)
            with phase("scatter"):
                inputs, kwargs = self.scatter(inputs, kwargs, self.device_ids)
            if not inputs and not kwargs:
                # No inputs at all: still run the module once, on the first device.
                inputs, kwargs = ((),), ({},)
            if len(self.devices) == 1:
                with phase("forward", self.src_device):
                    output = self.module(*inputs[0], **kwargs[0])
                # Per-device tuples are promised even when there is one device.
                return self.gather([output], self.output_device) if self._keeps_apart else output
            # A short batch gives fewer pieces than devices: use only as many replicas.
            with phase("replicate"):
                replicas = self.replicate(self.module, self.device_ids[: len(inputs)])
            outputs = self.parallel_apply(replicas, inputs, kwargs)  # times each replica
            with phase("gather"):
                return self.gather(outputs, self.output_device)

    # [data-parallel-forward]

    # [data-parallel-steps]
    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any], device_ids: Sequence[DeviceLike]
    ) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
        if self.inputs_are_scattered:
            return take_scattered(inputs, kwargs, self._devices_for(device_ids))
        return scatter_kwargs(inputs, kwargs, self._devices_for(device_ids), dim=self.dim)

    def replicate(self, module: nn.Module, device_ids: Sequence[DeviceLike]) -> list[nn.Module]:
        # Under torch.no_grad() nothing will be differentiated: skip the autograd wiring.
        return self._replicate(module, self._devices_for(device_ids), not torch.is_grad_enabled())

    def parallel_apply(
        self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Sequence[dict]
    ) -> list[Any]:
        return parallel_apply(replicas, inputs, kwargs, self.devices[: len(replicas)])

    def gather(self, outputs: Sequence[Any], output_device: DeviceLike) -> Any:
        if self._keeps_apart:
            return gather_except(
                outputs, output_device, self.dim, self.except_keywords, self.gather_to_one_device
            )
        return gather(outputs, output_device, dim=self.dim)

    # [data-parallel-steps]

    def _devices_for(self, device_ids: Sequence[DeviceLike]) -> list[Device]:
        # Ids come in as ints (PyTorch's convention): look up the devices resolved in
        # __init__; anything else (an override passing other ids) is checked afresh.
        known = self._device_of_id
        return resolved([known.get(d, d) if type(d) is int else d for d in device_ids])

    # [data-parallel-options]
    def _set_options(
        self,
        gather_to_one_device: bool,
        inputs_are_scattered: bool,
        except_keywords: Iterable[Any],
        sort_and_gather: bool,
    ) -> None:
        if isinstance(except_keywords, str):
            # A lone string would otherwise be read as a set of one-letter keys.
            raise TypeError(
                f"except_keywords must be a list of dict keys, got the string "
                f"{except_keywords!r}; write except_keywords=[{except_keywords!r}]."
            )
        self.gather_to_one_device = gather_to_one_device
        self.inputs_are_scattered = inputs_are_scattered
        self.except_keywords = frozenset(except_keywords)
        self.sort_and_gather = sort_and_gather
        if sort_and_gather and self._keeps_apart:
            raise ValueError(
                "sort_and_gather=True gathers every output to one device, but "
                "gather_to_one_device=False or except_keywords ask to keep outputs "
                "per device. Use one or the other; to gather per-device tuples later, "
                "call learn_parallel.gather_per_device()."
            )

    @property
    def _keeps_apart(self) -> bool:
        """True when some outputs stay per-device tuples instead of being gathered."""
        return not self.gather_to_one_device or bool(self.except_keywords)

    # [data-parallel-options]


# [functional]
def data_parallel(
    module: nn.Module,
    inputs: Any,
    device_ids: Sequence[DeviceLike] | None = None,
    output_device: DeviceLike | None = None,
    dim: int = 0,
    module_kwargs: dict[str, Any] | None = None,
) -> Any:
    """One DataParallel forward pass as a function: no wrapper module is kept."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    devices = resolve_device_ids(device_ids)
    output = devices[0] if output_device is None else to_device(output_device, allow_cpu=True)
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, devices, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    used = devices[: len(inputs)]
    replicas = replicate(module, used, not torch.is_grad_enabled())  # checks the source too
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, output, dim)


# [functional]
