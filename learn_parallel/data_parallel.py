"""DataParallel, assembled: scatter -> replicate -> parallel_apply -> gather.

`DataParallel` has PyTorch's constructor and the same four overridable steps,
so ``torch.nn.DataParallel`` can be swapped for ``learn_parallel.DataParallel``
with nothing else changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from learn_parallel.devices import Device, DeviceLike, check_balance, resolve_device_ids, to_device
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate
from learn_parallel.scatter_gather import gather, scatter_kwargs
from learn_parallel.timing import phase


# [source-device-check]
def check_on_source_device(module: nn.Module, source: Device) -> None:
    """Raise unless every parameter and buffer of ``module`` is on ``source``.

    Replicas are copied from the source device, so a tensor anywhere else would
    either be missed or break the copy halfway. The message names the tensor.
    """
    for kind, named in (("parameter", module.named_parameters), ("buffer", module.named_buffers)):
        for name, tensor in named():
            if tensor.device != source.torch_device:
                raise RuntimeError(
                    f"module must have its parameters and buffers on device {source} "
                    f"(device_ids[0]) but {kind} '{name}' is on {tensor.device}. "
                    f"Move the module there before the forward pass "
                    f"(module.to('{source.torch_device}')), or put that device first "
                    f"in device_ids."
                )


# [source-device-check]


# [data-parallel-init]
class DataParallel(nn.Module):
    """Split each batch across devices, run a replica of ``module`` on each, join the outputs.

    ``device_ids=None`` uses every GPU or, on a machine without one, every
    simulated device. ``output_device`` (default ``device_ids[0]``; ``"cpu"``
    allowed) is where outputs are gathered. ``dim`` is the batch dimension.
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
        self.devices: list[Device] = resolve_device_ids(device_ids)
        self.device_ids: list[int] = [d.index for d in self.devices]
        self.src_device: Device = self.devices[0]
        self.output_device: Device = (
            self.src_device if output_device is None else to_device(output_device, allow_cpu=True)
        )
        check_balance(self.devices)
        if len(self.devices) == 1:
            # Nothing to split: the module will simply be called on that device.
            self.module.to(self.src_device.torch_device)

    # [data-parallel-init]

    def extra_repr(self) -> str:
        simulated = " (simulated on the CPU)" if self.src_device.is_simulated else ""
        devices = ", ".join(map(str, self.devices))
        return f"devices=[{devices}]{simulated}, output_device={self.output_device}, dim={self.dim}"

    # [data-parallel-forward]
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with record_function("learn_parallel.DataParallel.forward"):
            check_on_source_device(self.module, self.src_device)
            with phase("scatter"):
                inputs, kwargs = self.scatter(inputs, kwargs, self.device_ids)
            if not inputs and not kwargs:
                # No inputs at all: still run the module once, on the first device.
                inputs, kwargs = ((),), ({},)
            if len(self.devices) == 1:
                with phase("forward", self.src_device):
                    return self.module(*inputs[0], **kwargs[0])
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
        return scatter_kwargs(inputs, kwargs, self._devices_for(device_ids), dim=self.dim)

    def replicate(self, module: nn.Module, device_ids: Sequence[DeviceLike]) -> list[nn.Module]:
        # Under torch.no_grad() nothing will be differentiated: skip the autograd wiring.
        return replicate(module, self._devices_for(device_ids), not torch.is_grad_enabled())

    def parallel_apply(
        self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Sequence[dict]
    ) -> list[Any]:
        return parallel_apply(replicas, inputs, kwargs, self.devices[: len(replicas)])

    def gather(self, outputs: Sequence[Any], output_device: DeviceLike) -> Any:
        return gather(outputs, output_device, dim=self.dim)

    # [data-parallel-steps]

    def _devices_for(self, device_ids: Sequence[DeviceLike]) -> list[Device]:
        # Ids come in as ints (PyTorch's convention); map them back to our devices.
        return [to_device(d) for d in device_ids]


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
    check_on_source_device(module, devices[0])
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, devices, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    used = devices[: len(inputs)]
    replicas = replicate(module, used, not torch.is_grad_enabled())
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, output, dim)


# [functional]
