"""Gradients on the wrong device fail on simulated devices as they fail on GPUs.

PyTorch's autograd engine checks that every gradient sits on its tensor's device ("invalid
gradient at index 0 - expected device cuda:0 but got cpu") but skips tensor subclasses,
which simulated tensors are. So the check is made here where a program hands autograd a
gradient of its own: ``backward(gradient)`` and ``torch.autograd.grad(..., grad_outputs)``
(`check_given`), and a custom ``autograd.Function``'s ``backward`` (`install`). As on CUDA, a
0-dim gradient is moved to the right device instead of refused.

The engine itself is patched too (`patch_backward`): a backward pass runs on the calling
thread, and an exception raised by a tensor hook on a simulated tensor stops the backward
call with that exception, as on GPUs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import torch

from learn_parallel.sim.device_ids import NAME


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


# Tensor hooks run inside the autograd engine. When a Python hook raises, PyTorch
# unwinds with the Python error still set, and on the way out the device guard
# that PyTorch installs for a backend written in Python calls back into Python
# from a noexcept method, which then fails and ends the process. So a hook on a
# simulated tensor keeps the exception it raised and hands PyTorch a result that
# PyTorch refuses in C++ (no Python error set); `patch_backward` then raises the
# hook's own exception from the backward call, which stops there as on GPUs.
HOOK_REGISTRARS = {torch.Tensor.register_hook, torch.Tensor.register_post_accumulate_grad_hook}
_hook_error = threading.local()


def _rejected() -> torch.Tensor:
    # Hooks must return None or a tensor like their input: PyTorch's C++ check
    # refuses a 0-element CPU bool tensor without setting a Python error.
    return torch.empty(0, dtype=torch.bool)


def guarded_hook(hook: Any) -> Any:
    @functools.wraps(hook)
    def run(*args: Any) -> Any:
        try:
            return hook(*args)
        except BaseException as error:
            if getattr(_hook_error, "error", None) is None:
                _hook_error.error = error
            return _rejected()

    return run


# What torch's engine asserts when a backward on CUDA tensors runs in a process where a
# backend written in Python is registered: torch then takes that backend (PrivateUse1) for
# its accelerator, and the engine's stream bookkeeping for CUDA tensors fails (torch 2.11).
_CUDA_AFTER_SIM = "opt_ready_stream && opt_parent_stream"
CUDA_AFTER_SIM_MESSAGE = (
    "Backward on CUDA tensors cannot run in a process where learn_parallel's simulated "
    "devices are registered (torch then takes 'sim' for its accelerator and its autograd "
    "engine stops in an internal assertion): train on the GPU in a fresh process that "
    "uses no simulated devices, with LEARN_PARALLEL_SIMULATE unset."
)


def patch_backward() -> None:
    """Run backward passes on the calling thread.

    PyTorch's autograd engine gives every device index of an accelerator its
    own worker thread, sized by the number of devices the backend reports; a
    backend registered from Python reports one. Turning the engine's
    per-device threads off for a backward pass (`set_multithreading_enabled`)
    runs it on the calling thread instead, which is where CPU work runs anyway.
    A backward on CUDA tensors in the same process fails inside torch; that failure
    is raised again saying why, and what to do (`CUDA_AFTER_SIM_MESSAGE`).
    """
    import torch.autograd.graph as graph

    original = graph._engine_run_backward

    def run_backward(outputs: Any, grads: Any = None, *args: Any, **kwargs: Any) -> Any:
        grads = check_given(outputs, grads)  # the engine skips subclasses
        outer, _hook_error.error = getattr(_hook_error, "error", None), None
        try:
            with torch.autograd.set_multithreading_enabled(False):
                return original(outputs, grads, *args, **kwargs)
        except RuntimeError as failure:
            error = _hook_error.error
            if error is None:
                if _CUDA_AFTER_SIM in str(failure):
                    raise RuntimeError(CUDA_AFTER_SIM_MESSAGE) from None
                raise
            raise error.with_traceback(error.__traceback__) from None  # a hook raised it
        finally:
            _hook_error.error = outer  # a backward inside a hook leaves the outer one's alone

    graph._engine_run_backward = run_backward
    torch.autograd._engine_run_backward = run_backward
