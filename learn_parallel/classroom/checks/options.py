"""Checks for the options chapter."""

from __future__ import annotations

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.placement import Moves
from learn_parallel.classroom.tools import forbid, learn_parallel_functions, machine


def _fill(template, x):  # every number k in the template becomes the tensor k * x
    if isinstance(template, dict):
        return {key: _fill(value, x) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(value, x) for value in template]
    return template * x


def _tuple_paths(tree, path=()):  # where DataParallel left per-device tuples
    if isinstance(tree, dict):
        return set().union(*(_tuple_paths(v, path + (k,)) for k, v in tree.items()))
    if isinstance(tree, list):
        return set().union(*(_tuple_paths(v, path + (i,)) for i, v in enumerate(tree)))
    return {path} if isinstance(tree, tuple) else set()


class _Template(nn.Module):
    def __init__(self, template) -> None:
        super().__init__()
        self.template = template

    def forward(self, x):
        return _fill(self.template, x)


@exercise("options-kept", "Predict what stays apart")
def kept_apart(fn) -> str:
    here = machine()
    cases = [
        ({"outputs": {"out1": 1, "out2": 2}, "second_output": 3}, ["out1", "out2"]),
        ({"a": {"keep": {"x": 1, "more": [2, {"y": 3}]}, "b": 4}, "c": [5, {"keep": 6}]}, ["keep"]),
        ([{"scores": 1, "aux": {"scores": 2, "other": 3}}, 4], ["scores"]),
        ({"x": 1, "y": {"x": 2, "z": 3}}, ["x"]),
        ({"x": 1, "y": {"z": 2}}, ["missing"]),
    ]
    x = torch.randn(6, 2, device=here.source)
    for template, keys in cases:
        model = _Template(template)
        actual = _tuple_paths(lp.OptionsDataParallel(model, except_keywords=keys)(x))
        whole = model(x)
        with forbid(*learn_parallel_functions()):  # predict, do not run DataParallel
            predicted = fn(whole, keys)
        assert predicted == actual, (
            f"keys {keys}: predicted {sorted(predicted, key=repr)}, "
            f"DataParallel kept {sorted(actual, key=repr)}"
        )
    return f"{len(cases)} outputs predicted"


def _loss_and_gradients(fn, net: nn.Module, outputs, y: torch.Tensor) -> dict:
    """Run the answer where it lives, then backward from its loss: all of it as data."""
    with Moves() as moves, forbid((torch, "cat"), *learn_parallel_functions()):
        loss = fn(outputs, y)
    moved = [tuple(s) for s in moves.moved_non_scalars_with_grad()]
    graph = isinstance(loss, torch.Tensor) and loss.requires_grad  # read here: data has no graph
    if moved or not graph or loss.dim() != 0:
        return {"moved": moved, "loss": loss, "graph": graph, "grads": None}
    loss.backward()
    grads = [_grad(p) for p in net.parameters()]
    return {"moved": moved, "loss": loss, "graph": graph, "grads": grads}


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.grad.clone() if tensor.grad is not None else torch.zeros_like(tensor)


@exercise("options-loss", "A loss without gathering")
def per_device_loss(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to(here.source)
    wrapped = lp.OptionsDataParallel(net, gather_to_one_device=False)
    for rows in (7, 10, 2):
        x, y = torch.randn(rows, 4, device=here.source), torch.randn(rows, 3, device=here.source)
        net.zero_grad()
        outputs = wrapped(x)
        answer = observe(_loss_and_gradients, fn, net, outputs, y)
        loss, moved = answer["loss"], answer["moved"]
        assert not moved, (
            f"{rows} rows: output pieces of shape {tuple(moved[0])} were copied between devices; "
            "move no piece of the outputs: only the target slices out and the per-device sums back"
        )
        expected = nn.functional.mse_loss(net(x), y)
        assert isinstance(loss, torch.Tensor), f"return a tensor, not {type(loss).__name__}"
        assert loss.dim() == 0 and loss.device == y.device, "return a 0-dim tensor on y's device"
        assert answer["graph"], (
            f"{rows} rows: the loss has no graph back to the outputs (backward could not reach "
            "the model): compute it from the output pieces, without .item() or a new tensor"
        )
        assert torch.allclose(loss, expected, atol=1e-6), (
            f"{rows} rows: loss {loss.item():.5f}, expected {expected.item():.5f}"
        )
        got = answer["grads"]
        net.zero_grad()
        expected.backward()
        same = all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(got, net.parameters()))
        assert same, f"{rows} rows: the gradients differ from the gathered loss's"
    return "batches of 7, 10 and 2 rows"
