"""Checks for the pitfalls chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.tools import machine


@exercise("pitfalls-count")
def counting(model_class, run_fn) -> str:
    here = machine()
    torch.manual_seed(0)
    model = model_class().to(here.source)
    wrapped = lp.DataParallel(model)
    batches = (10, 3, 8)
    for rows in batches:
        x = torch.randn(rows, 4, device=here.source)
        out = run_fn(wrapped, x)
        assert isinstance(out, torch.Tensor) and torch.allclose(out, model.linear(x)), (
            "run() must return the model's output (only the tensor of the linear layer)"
        )
    expected_calls = sum(len(torch.arange(rows).chunk(len(here.devices))) for rows in batches)
    got, expected = (model.calls, model.rows), (expected_calls, sum(batches))
    assert got == expected, f"batches of {batches}: expected (calls, rows) = {expected}, got {got}"
    return f"(calls, rows) = {got}"


@exercise("pitfalls-groupnorm")
def replace_batchnorm(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), block, nn.Linear(8, 2))
    net = fn(net.to(here.source)).train()
    left = [n for n, m in net.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert not left, f"BatchNorm layers left: {left}"
    norms = [m for m in net.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 2 and all(m.num_channels == 8 and m.num_groups == 1 for m in norms), (
        f"expected 2 GroupNorm(1, 8), got {[str(m) for m in norms]}"
    )
    for m in norms:
        assert all(p.device == here.source for p in m.parameters()), (
            f"{m} is not on the source device {here.devices[0]}"
        )
    x = torch.randn(10, 4, device=here.source)
    assert torch.allclose(lp.DataParallel(net)(x), net(x), atol=1e-6), "outputs differ"
    return str([str(m) for m in norms])
