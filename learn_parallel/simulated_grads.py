"""Gradients on the wrong device fail on simulated devices as they fail on GPUs.

PyTorch's autograd engine checks that every gradient sits on the device of the
tensor it belongs to, and raises "invalid gradient at index 0 - expected device
cuda:0 but got cpu", but it skips that check for tensor subclasses, which is
what a simulated tensor is. So the two places where a program hands autograd a
gradient of its own make the check here:

- ``backward(gradient)`` and ``torch.autograd.grad(..., grad_outputs)``: the
  gradients given for the outputs (`check_given`);
- the ``backward`` of a custom ``torch.autograd.Function`` (Broadcast's and
  Gather's in this course): the gradients it returns for its inputs (`install`).

As on CUDA, a 0-dim gradient is moved to the right device instead of refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

NAME = "sim"


def _checked(grad: Any, expected: torch.device, index: int) -> Any:
    if not isinstance(grad, torch.Tensor) or grad.device == expected:
        return grad
    if NAME not in (grad.device.type, expected.type):
        return grad  # between real devices: PyTorch's own check applies
    if grad.dim() == 0:
        return grad.to(expected)
    raise RuntimeError(
        f"invalid gradient at index {index} - expected device {expected} but got "
        f"{grad.device}. Return (or pass) the gradient on the device of the tensor it "
        f"belongs to, e.g. with .to('{expected}')."
    )


def check_given(outputs: Any, grads: Any) -> Any:
    """The gradients given for ``outputs``, each checked against its output's device."""
    if isinstance(outputs, torch.Tensor) or not isinstance(grads, Sequence):
        return grads
    return tuple(
        _checked(g, t.device, i) if isinstance(t, torch.Tensor) else g
        for i, (t, g) in enumerate(zip(outputs, grads))
    )


def _check_returned(node: Any, grads: Any) -> Any:
    """What a custom Function's backward returned, checked against its tensor inputs' devices."""
    single = not isinstance(grads, tuple)
    checked = [grads] if single else list(grads)
    # Inputs that need a gradient line up, in order, with the edges that lead somewhere;
    # the edge's position is the index CUDA's message gives.
    edges = [(i, e) for i, e in enumerate(node.next_functions) if e[0] is not None]
    needed = [i for i, need in enumerate(node.needs_input_grad) if need]
    for position, (index, (next_node, slot)) in zip(needed, edges):
        if position < len(checked):
            expected = next_node._input_metadata[slot].device
            checked[position] = _checked(checked[position], expected, index)
    return checked[0] if single else tuple(checked)


def install() -> None:
    """Check what every custom Function's backward returns (once per process)."""
    backward = torch.autograd.function.BackwardCFunction
    if getattr(backward.apply, "_checks_devices", False):
        return
    original = backward.apply

    def apply(self: Any, *args: Any) -> Any:
        return _check_returned(self, original(self, *args))

    apply._checks_devices = True  # type: ignore[attr-defined]
    backward.apply = apply
