"""Checks for the source-device chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import machine


@exercise("source-misplaced", "Every misplaced tensor")
def misplaced(fn) -> str:
    source = machine().devices[0]
    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Linear(2, 2)).to(source.torch_device)
    got = fn(m, source)
    assert got == [], f"a module on the source device has nothing misplaced, got {got}"
    m[0].bias = nn.Parameter(torch.zeros(2, device="meta"))
    m[1].running_var = torch.ones(2, device="meta")
    m[2].to("meta")
    expected = ["0.bias", "2.weight", "2.bias", "1.running_var"]
    got = fn(m, source)
    assert got == expected, f"expected {expected}, got {got}"
    return str(got)


def _linear_layers_initialised(model: nn.Module, tensors: dict) -> None:
    for name, layer in model.named_modules():
        if isinstance(layer, nn.Linear):
            bound = 1 / layer.in_features**0.5  # reset_parameters draws from U(-bound, bound)
            for tensor in (tensors[f"{name}.weight"], tensors[f"{name}.bias"]):
                assert torch.isfinite(tensor).all() and tensor.abs().max() <= bound + 1e-6, (
                    f"layer {name!r} holds uninitialised values: call reset_parameters()"
                )
            weight = tensors[f"{name}.weight"]
            assert weight.std() > 0, f"layer {name!r} is constant: not initialised"


def _materialised(fn, dp: lp.DataParallel) -> dict | None:
    """Run the answer where it lives; its module's tensors and one output, as data."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        dp = fn(dp)
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    if not isinstance(dp, lp.DataParallel):
        return None
    tensors = dict([*dp.module.named_parameters(), *dp.module.named_buffers()])
    source = machine().source
    if any(t.device != source for t in tensors.values()):
        return {"tensors": tensors, "out": None}
    return {"tensors": tensors, "out": dp(torch.randn(5, 4, device=source))}


@exercise("source-materialise", "Materialise a meta model")
def materialise(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to("meta")
    dp = lp.DataParallel(model)
    # Uninitialised memory reads as NaN while this is on (torch's
    # fill_uninitialized_memory), so forgetting to initialise cannot pass by luck.
    made = observe(_materialised, fn, dp)
    assert made is not None, "return the DataParallel"
    for name, tensor in made["tensors"].items():
        assert tensor.device == here.source, (
            f"{name} is on {tensor.device}, expected the source device {here.devices[0]}"
        )
    _linear_layers_initialised(model, made["tensors"])
    out = made["out"]
    assert out.shape == (5, 3), f"output shape {tuple(out.shape)}, expected (5, 3)"
    assert torch.isfinite(out).all(), "the output is not finite: weights were not initialised"
    return f"output {tuple(out.shape)} on {out.device}"
