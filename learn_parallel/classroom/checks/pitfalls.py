"""Checks for the pitfalls chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import machine

BATCHES = (10, 3, 8)


def _count(model_class, run_fn) -> dict:
    """Run the answer's model where it lives: were its outputs right, and what it counted."""
    source = machine().source
    torch.manual_seed(0)
    model = model_class().to(source)
    wrapped = lp.DataParallel(model)
    right = []
    for rows in BATCHES:
        x = torch.randn(rows, 4, device=source)
        out = run_fn(wrapped, x)
        right.append(isinstance(out, torch.Tensor) and torch.allclose(out, model.linear(x)))
    return {"right": right, "counted": (model.calls, model.rows)}


@exercise("pitfalls-count", "Count calls without losing them")
def counting(model_class, run_fn) -> str:
    here = machine()
    batches = BATCHES
    seen = observe(_count, model_class, run_fn)
    assert all(seen["right"]), (
        "run() must return the model's output (only the tensor of the linear layer)"
    )
    expected_calls = sum(len(torch.arange(rows).chunk(len(here.devices))) for rows in batches)
    got, expected = seen["counted"], (expected_calls, sum(batches))
    assert got == expected, f"batches of {batches}: expected (calls, rows) = {expected}, got {got}"
    return f"(calls, rows) = {got}"


def _replaced(fn) -> dict:
    """Run the answer where it lives and describe the network it returned, as data."""
    source = machine().source
    torch.manual_seed(0)
    # The inner BatchNorm keeps no running statistics: its running_mean is None.
    block = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8, track_running_stats=False))
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), block, nn.Linear(8, 2))
    net = fn(net.to(source)).train()
    left = [n for n, m in net.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    norms = [m for m in net.modules() if isinstance(m, nn.GroupNorm)]
    rows = 2 * (len(machine().devices) - 1) + 1  # slices of two rows, the last of one
    x = torch.randn(rows, 4, device=source)
    placed = all(p.device == source for m in norms for p in m.parameters())
    return {
        "left": left,
        "norms": [(str(m), m.num_channels, m.num_groups) for m in norms],
        "norm_devices": [sorted({str(p.device) for p in m.parameters()}) for m in norms],
        "outputs": (lp.DataParallel(net)(x), net(x)) if placed and not left else None,
    }


@exercise("pitfalls-groupnorm", "Replace BatchNorm")
def replace_batchnorm(fn) -> str:
    here = machine()
    net = observe(_replaced, fn)
    left, norms = net["left"], net["norms"]
    assert not left, f"BatchNorm layers left: {left}"
    assert len(norms) == 2 and all(c == 8 and g == 1 for _, c, g in norms), (
        f"expected 2 GroupNorm(1, 8), got {[name for name, _, _ in norms]}"
    )
    for (name, _, _), devices in zip(norms, net["norm_devices"]):
        assert devices == [str(here.devices[0])], (
            f"{name} is not on the source device {here.devices[0]}"
        )
    wrapped, whole = net["outputs"]
    assert torch.allclose(wrapped, whole, atol=1e-6), "outputs differ"
    return str([name for name, _, _ in norms])
