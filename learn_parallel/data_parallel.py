"""DataParallel, assembled: scatter -> replicate -> parallel_apply -> gather.

`DataParallel` has PyTorch's constructor and the same four overridable steps,
so ``torch.nn.DataParallel`` can be swapped for ``learn_parallel.DataParallel``
with nothing else changed (``book/data_parallel.ipynb``; the device checks of
``__init__`` are the devices chapter's, ``book/devices.ipynb``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from learn_parallel.devices import Device, DeviceLike, check_balance, resolve_devices
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.phases import phase
from learn_parallel.replicate import check_on_source_device
from learn_parallel.replicate import replicate as make_replicas
from learn_parallel.scatter_gather import gather, scatter_kwargs


def wrapper_devices(module: nn.Module, device_ids: Sequence[DeviceLike] | None) -> list[Device]:
    """The checked devices of a wrapper around ``module`` (DataParallel, TupleParallel).

    Warns when the GPUs are unbalanced; with a single device there is nothing to
    split, so the module is moved there and will simply be called on it.
    """
    devices = resolve_devices(device_ids)
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
    The four steps (`scatter`, `replicate`, `parallel_apply`, `gather`) are
    methods with PyTorch's signatures, so a variant overrides only the step it
    changes (``learn_parallel.variants``).
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        self.module = module
        self.dim = dim
        self.devices: list[Device] = wrapper_devices(module, device_ids)
        self.device_ids: list[int] = [d.index for d in self.devices]  # torch's attribute: ints
        self.src_device: Device = self.devices[0]
        self.output_device: Device = resolve_devices(
            self.src_device if output_device is None else output_device, output=True
        )

    # [data-parallel-init]

    def extra_repr(self) -> str:
        simulated = " (simulated on the CPU)" if self.src_device.is_simulated else ""
        devices = ", ".join(map(str, self.devices))
        return f"devices=[{devices}]{simulated}, output_device={self.output_device}, dim={self.dim}"

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        # scatter and replicate take int device ids, as torch.nn.DataParallel's do; an override
        # of replicate also takes over the source-device check it makes on several devices.
        with record_function("learn_parallel.DataParallel.forward"):
            if len(self.devices) == 1:  # on several, replicate checks before it copies
                check_on_source_device(self.module, self.src_device, copies=False)
            with phase("scatter"):
                inputs, kwargs = self.scatter(inputs, kwargs, self.device_ids)
            if not inputs and not kwargs:
                # No inputs at all: still run the module once, on the first device.
                inputs, kwargs = ((),), ({},)
            if len(self.devices) == 1:
                with phase("forward", self.src_device):
                    return self.module(*inputs[0], **kwargs[0])
            # chunk can give fewer pieces than devices (3, 5 or 6 rows on 4): as many replicas.
            with phase("replicate"):
                replicas = self.replicate(self.module, self.device_ids[: len(inputs)])
            outputs = self.parallel_apply(replicas, inputs, kwargs)  # times each replica
            with phase("gather"):
                return self.gather(outputs, self.output_device)

    # [data-parallel-steps]
    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any], device_ids: Sequence[DeviceLike]
    ) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim)

    def replicate(self, module: nn.Module, device_ids: Sequence[DeviceLike]) -> list[nn.Module]:
        # Under torch.no_grad() nothing will be differentiated: skip the autograd wiring.
        return make_replicas(module, device_ids, not torch.is_grad_enabled())

    def parallel_apply(
        self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Sequence[dict]
    ) -> list[Any]:
        # torch's signature passes no ids: replica i runs on device_ids[i].
        return parallel_apply(replicas, inputs, kwargs, self.devices[: len(replicas)])

    def gather(self, outputs: Sequence[Any], output_device: DeviceLike) -> Any:
        return gather(outputs, output_device, dim=self.dim)

    # [data-parallel-steps]


def data_parallel(
    module: nn.Module,
    inputs: Any,
    device_ids: Sequence[DeviceLike] | None = None,
    output_device: DeviceLike | None = None,
    dim: int = 0,
    module_kwargs: dict[str, Any] | None = None,
) -> Any:
    """One DataParallel forward pass as a function: no wrapper module is kept.

    Unlike the class, it never moves ``module``: it must sit on the first device.
    On one device the module is called directly, as in the class and in torch,
    so its output stays on that device whatever ``output_device`` says.
    """
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    devices = resolve_devices(device_ids)
    output = resolve_devices(devices[0] if output_device is None else output_device, output=True)
    if len(devices) == 1:  # on several, replicate checks before it copies
        check_on_source_device(module, devices[0], copies=False)
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, devices, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    if len(devices) == 1:
        return module(*inputs[0], **module_kwargs[0])
    used = devices[: len(inputs)]
    replicas = make_replicas(module, used, not torch.is_grad_enabled())  # checks the source
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, output, dim)
