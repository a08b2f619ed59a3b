"""Replicas built once and kept: their tensors live in one flat buffer per dtype.

`KeptReplicas` is `FastDataParallel`'s replicate step (the ladder chapter): one
clone per device, built once, refreshed in place from the original every step with
one multi-tensor copy and one copy per device, instead of rebuilt modules.
`check_keepable` is what the engines that keep replicas refuse when they wrap a module.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from learn_parallel.devices import Device
from learn_parallel.replicate import check_on_source_device
from learn_parallel.variants.clone_replicate import clone_to


def check_keepable(module: nn.Module, source: Device, cuda_graphs: bool, engine: str) -> None:
    """Refuse what ``engine`` (FastDataParallel, ReplicatedStep) cannot keep replicas of.

    CUDA graphs only on GPUs; gradients summed for parameters only (a buffer that
    requires grad would be left out); the module on the first device, checked once
    here, as the replicas are cloned from it once.
    """
    if cuda_graphs and source.is_simulated:
        raise ValueError(
            "cuda_graphs=True captures CUDA graphs, which need CUDA GPUs; these devices are "
            "simulated on the CPU. Use cuda_graphs=False here."
        )
    if any(b.requires_grad for b in module.buffers()):
        raise ValueError(
            f"{engine} sums the gradients of parameters only, but the module has a buffer "
            f"that requires grad. Make it a Parameter, or use DataParallel."
        )
    check_on_source_device(module, source)


# [flat-layout]
def group_by_dtype(tensors: Sequence[torch.Tensor]) -> dict[torch.dtype, list[int]]:
    """Positions of ``tensors`` per dtype: one flat buffer can hold only one dtype."""
    groups: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return groups


def move_into_flat(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Allocate one flat buffer for ``tensors`` and make each of them a view into it."""
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=device)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            view = flat[offset : offset + t.numel()].view(t.shape)
            view.copy_(t)
            t.data = view  # the same tensor object, now backed by the flat buffer
            offset += t.numel()
    return flat


# [flat-layout]


class KeptReplicas:
    """One clone of ``module`` per device, its parameters and buffers in flat buffers.

    The clones are a plain list, not submodules: they are not in the wrapper's
    ``parameters()`` or ``state_dict()``. Their parameters are leaves of their own.
    """

    def __init__(self, module: nn.Module, devices: Sequence[Device]) -> None:
        self.module = module
        self.params = list(module.parameters())
        self.buffers = list(module.buffers())
        originals = self.params + self.buffers
        groups = group_by_dtype(originals)
        self.replicas: list[nn.Module] = []
        self.flats: list[dict[torch.dtype, torch.Tensor]] = []
        self.replica_params: list[list[torch.Tensor]] = []
        for device in devices:
            replica = clone_to(module, device)
            mine = list(replica.parameters()) + list(replica.buffers())
            self.flats.append(
                {
                    d: move_into_flat([mine[i] for i in p], device.torch_device)
                    for d, p in groups.items()
                }
            )
            self.replicas.append(replica)
            self.replica_params.append(mine[: len(self.params)])
            if not self.flats[1:]:  # replica 0: the targets of each refresh
                self._first = {d: [mine[i] for i in p] for d, p in groups.items()}
                self._first_buffers = mine[len(self.params) :]
        self._originals = {d: [originals[i] for i in p] for d, p in groups.items()}
        self._module_pairs = list(zip(module.modules(), *(r.modules() for r in self.replicas)))

    def refresh(self, count: int) -> None:
        """Copy the original's parameters and buffers into the first ``count`` replicas.

        Per dtype: one multi-tensor copy into replica 0's flat buffer, then one
        device-to-device copy of that buffer into each other replica's (plain peer
        copies, not an NCCL broadcast), with no module rebuilt.
        """
        with torch.no_grad():
            for dtype, originals in self._originals.items():
                torch._foreach_copy_(self._first[dtype], originals)
                for flats in self.flats[1:count]:
                    flats[dtype].copy_(self.flats[0][dtype], non_blocking=True)
        self.copy_training_flags(count)

    def copy_training_flags(self, count: int) -> None:
        """A submodule switched to eval() must be eval() in every replica too."""
        for original, *replicas in self._module_pairs:
            for replica in replicas[:count]:
                replica.training = original.training

    def copy_back_buffers(self) -> None:
        """Replica 0's buffers (BatchNorm statistics) become the original's, as in DataParallel."""
        if self.buffers and self.module.training:
            with torch.no_grad():
                torch._foreach_copy_(self.buffers, self._first_buffers)

    def check_unchanged(self) -> None:
        """Refuse a module whose parameters or buffers were replaced after wrapping."""
        now = list(self.module.parameters()) + list(self.module.buffers())
        kept = self.params + self.buffers
        if len(now) != len(kept) or any(a is not b for a, b in zip(now, kept)):
            raise RuntimeError(
                "The wrapped module's parameters or buffers were replaced after "
                "FastDataParallel was built (module.to(), a new Parameter, ...), so its "
                "kept replicas no longer match. Wrap the module again."
            )
