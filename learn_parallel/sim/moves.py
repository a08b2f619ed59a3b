"""Moves between the host and simulated devices where torch's own path does not fit.

- ``module.to("sim:2")`` while an autograd graph holds a weight: a clear refusal
  (`swap_tensors`), where torch would poison the graph.
- Pinning host memory (``DataLoader(pin_memory=True)`` too) once ``sim`` is torch's
  accelerator, which has no pinned memory (`pin_memory`).

`learn_parallel.sim.patches` installs them at the simulator's first use.
"""

from __future__ import annotations

from typing import Any

import torch

from learn_parallel.sim.device_ids import NAME
from learn_parallel.sim.tensor import SimTensor

_aten = torch.ops.aten
_COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd  # where torch's own kernel stays


def pin_memory(self: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """The CPU kernel of ``aten::_pin_memory`` once ``sim`` is torch's accelerator.

    torch pins for the current accelerator, now ``sim``, which has no pinned memory. Where
    a GPU exists, pin for it with torch's own kernel, so copies to it stay asynchronous;
    without one, host memory is all one kind, and a pinned copy is a plain copy.
    """
    if device is None or torch.device(device).type == NAME:
        if not torch.cuda.is_available():
            return self.clone()
        device = torch.device("cuda")
    return _aten._pin_memory.default._op_dk(_COMPOSITE, self, device)


def refusing_to_move_saved(original: Any) -> Any:
    """``torch.utils.swap_tensors`` that refuses to move a tensor an autograd graph holds.

    PyTorch moves the parameters of a tensor subclass with `torch.utils.swap_tensors`
    (on GPUs ``param.data = moved`` is used instead, and a live graph keeps the storage
    it saved). The swap refuses a tensor that a graph has saved, with a message about
    use counts, and poisons the graph of one that only a gradient accumulator holds; a
    backward pass over simulated tensors that meets such a poisoned node ends the
    process. So any graph that holds a simulated tensor, or has saved one that is moved
    onto a simulated device, makes the move fail here, saying how to free the graph.
    """

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        uses = t1._use_count()
        saved = uses > 2 or (uses == 2 and not t1.is_leaf)
        if (saved and isinstance(t2, SimTensor)) or (uses > 1 and isinstance(t1, SimTensor)):
            raise RuntimeError(
                f"Cannot move a {tuple(t1.shape)} tensor from {t1.device} to {t2.device} "
                f"while an autograd graph holds it (on GPUs the move works and the old graph "
                f"keeps the old storage; simulated devices cannot do that). Free the graph "
                f"first: call backward() on the output if you need its gradients, `del` the "
                f"outputs and losses that hold the graph, then module.to('{t2.device}') "
                f"again (submodules before this one may have moved already)."
            )
        original(t1, t2)

    swap_tensors.__wrapped__ = original  # type: ignore[attr-defined]
    return swap_tensors
