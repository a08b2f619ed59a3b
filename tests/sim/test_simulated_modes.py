"""Simulated devices under inference mode, and moving a module a live graph still holds.

CUDA facts (read on one H100, torch 2.11) are named in each test's first line.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel import sim


@pytest.fixture(autouse=True)
def _on():
    sim.enable()


VIEWS = {
    "x[:2]": lambda x: x[:2],
    "chunk": lambda x: x.chunk(2)[1],
    "split": lambda x: x.split(3)[0],
    "narrow": lambda x: x.narrow(0, 1, 2),
    "transpose": lambda x: x.t(),
}


@pytest.mark.parametrize("view", VIEWS)
def test_views_under_inference_mode_work_and_stay_normal_tensors(view):
    """CUDA: a view of a normal tensor under inference_mode() is a normal tensor."""
    x = torch.arange(16.0).view(8, 2).to("sim:1")
    with torch.inference_mode():
        piece = VIEWS[view](x)
        computed = x + 1
    assert piece.device == x.device and not piece.is_inference()
    assert torch.equal(piece.cpu(), VIEWS[view](x.cpu()))
    assert computed.is_inference()  # CUDA: a new result is an inference tensor


def test_moving_to_another_device_under_inference_mode_copies_there():
    """CUDA: x.to("cuda:1") under inference_mode() is a copy on cuda:1."""
    x = torch.ones(3).to("sim:0")
    with torch.inference_mode():
        moved = x.to("sim:1")
        module = nn.Linear(3, 2).to("sim:2")
    assert moved.device == torch.device("sim:1") and moved.data_ptr() != x.data_ptr()
    assert module.weight.device == torch.device("sim:2")


MOVES = {  # each move of an inference tensor, and where CUDA puts the result
    "cpu()": (lambda y: y.cpu(), "cpu"),
    "to('cpu')": (lambda y: y.to("cpu"), "cpu"),
    "to('sim:1')": (lambda y: y.to("sim:1"), "sim:1"),
    "to(float64)": (lambda y: y.to(torch.float64), "sim:0"),
    "clone()": (lambda y: y.clone(), "sim:0"),
    "copy_ into cpu": (lambda y: torch.empty(3).copy_(y), "cpu"),
    "copy_ into sim:2": (lambda y: torch.empty(3).to("sim:2").copy_(y), "sim:2"),
}


@pytest.mark.parametrize("inside", [True, False], ids=["inside the mode", "after it"])
@pytest.mark.parametrize("move", MOVES)
def test_an_inference_tensor_moves_where_it_is_sent(move, inside):
    """CUDA: a tensor made under inference_mode() moves to the CPU or another device, inside
    the block and after it, as any tensor does (`y.cpu()` is a CPU tensor)."""
    function, where = MOVES[move]
    with torch.inference_mode():
        y = torch.arange(3.0).to("sim:0")
        moved = function(y) if inside else None
    moved = function(y) if moved is None else moved
    assert y.is_inference() and moved.device == torch.device(where)
    assert (type(moved) is torch.Tensor) == (where == "cpu")
    assert torch.equal(moved.cpu(), torch.arange(3.0, dtype=moved.dtype))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("wrapper", [lp.DataParallel, torch.nn.DataParallel])
def test_data_parallel_without_grad_equals_one_device_and_builds_no_graph(mode, wrapper):
    """CUDA: DataParallel works under inference_mode() and no_grad(), with no graph."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to("sim:0")
    x = torch.randn(8, 3)
    with mode():
        expected = module(x.to("sim:0"))
        output = wrapper(module)(x)
        scattered = torch.nn.parallel.scatter(x, [0, 1, 2, 3])
    assert torch.allclose(output.cpu(), expected.cpu())
    assert output.grad_fn is None and not output.requires_grad
    assert [p.device.index for p in scattered] == [0, 1, 2, 3]


@pytest.mark.parametrize(("source", "target"), [("sim:0", "sim:2"), ("cpu", "sim:0")])
def test_moving_a_module_whose_weight_a_live_graph_saved_says_what_to_do(source, target):
    """CUDA: the move works, and the old graph keeps what it saved (BatchNorm saved its
    weight itself, so its backward then fails on mixed devices). Simulated: refused."""
    module = nn.BatchNorm1d(4).to(source)
    output = module(torch.randn(8, 4).to(source))
    with pytest.raises(RuntimeError, match="Couldn't swap BatchNorm1d.weight") as caught:
        module.to(target)
    assert "Free the graph first: call backward()" in str(caught.value.__cause__)
    assert "`del` the outputs and losses" in str(caught.value.__cause__)
    assert {p.device for p in module.parameters()} == {torch.device(source)}
    output.sum().backward()  # the graph is whole: nothing was poisoned or moved
    assert module.weight.grad.device == torch.device(source)
    del output
    module.to(target)  # no graph holds the weights now: the move works
    assert {p.device for p in module.parameters()} == {torch.device(target)}
    assert module.weight.grad.device == torch.device(target)


def test_a_loss_kept_after_backward_still_blocks_a_move_between_simulated_devices():
    """CUDA: the move works. Simulated: the kept loss's graph would be poisoned, and a
    backward over a poisoned graph of simulated tensors ends the process: refused."""
    torch.manual_seed(1)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("sim:0")
    weight = module[0].weight
    loss = module(torch.randn(8, 3).to("sim:0")).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="Couldn't swap Linear.weight"):
        module.to("sim:3")
    del loss
    module.to("sim:3")
    assert module[0].weight is weight and weight.device == torch.device("sim:3")
    module(torch.randn(8, 3).to("sim:3")).sum().backward()
    assert weight.grad.device == torch.device("sim:3")
