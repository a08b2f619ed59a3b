"""Checks of the chapter "Replicate the libtorch way" (book/libtorch_replicate.ipynb)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.tools import forbid, machine
from learn_parallel.replicate import replicate
from learn_parallel.variants.clone_replicate import (
    ReduceAddEdge,
    clone_module_by_module,
    clone_replicate,
)


def _devices(count: int = 3) -> list:
    devices = machine().devices[:count]
    assert len(devices) >= 2, "These checks need at least two devices (simulated ones will do)."
    return devices


def _without_reduce_add_edge():
    """The chapter's ReduceAddEdge (or a subclass of it) would be the answer, not the student's."""
    return forbid(ReduceAddEdge, (ReduceAddEdge, "backward"))


def _wired(wire, source, original, clones, probes) -> dict:
    """Run the answer where it lives, then backward through what it returned, as data."""
    with _without_reduce_add_edge():
        wired = list(wire(source, original, clones))
    described = {
        "count": len(wired),
        "grad_fn": [out.grad_fn is not None for out in wired],
        "same": [
            out.device == clone.device and out.data_ptr() == clone.data_ptr()
            for out, clone in zip(wired, clones)
        ],
        "grad": None,
    }
    if len(wired) != len(clones) or not all(described["grad_fn"] + described["same"]):
        return described
    # Each replica's term lives on its device: move it to the source before adding
    # (a sum across devices fails on GPUs as on simulated devices).
    loss = sum(
        ((k + 1) * (out * p.to(out.device)).sum()).to(source)
        for k, (out, p) in enumerate(zip(wired, probes))
    )
    with _without_reduce_add_edge():
        loss.backward()
    described["grad"] = original.grad
    described["clone_grads"] = [c.grad is not None for c in clones]
    return described


@exercise("reduce-add-edge", "Wire the reduce-add edge for one parameter")
def check_reduce_add_edge(wire: Callable[..., Sequence[torch.Tensor]]) -> None:
    """``wire(source, original, clones)`` connects every clone to ``original``'s gradient."""
    devices = _devices()
    source = devices[0].torch_device
    generator = torch.Generator().manual_seed(0)
    original = torch.randn(4, 3, generator=generator, dtype=torch.double)
    original = original.to(source).requires_grad_()
    clones = [original.detach().to(d.torch_device, copy=True) for d in devices]
    probes = [torch.randn(4, 3, generator=generator, dtype=torch.double) for _ in clones]
    wired = observe(_wired, wire, source, original, clones, probes)
    assert wired["count"] == len(clones), (
        f"wire() returned {wired['count']} tensors for {len(clones)} clones: one per clone, "
        "in order."
    )
    for i, (has_grad_fn, same) in enumerate(zip(wired["grad_fn"], wired["same"])):
        assert has_grad_fn, (
            f"Tensor {i} has no grad_fn, so backward cannot reach the original through it: "
            f"return the outputs of an autograd Function that took the original as an input."
        )
        assert same, (
            f"Tensor {i} is not the clone itself (it has other storage or another device): "
            f"the clone is already made; return it from forward unchanged, never a new copy."
        )
    expected = sum((k + 1) * p for k, p in enumerate(probes))
    grad = wired["grad"]
    assert grad is not None, "The original got no gradient: its edge is missing."
    assert grad.device == source, (
        f"The summed gradient must land on the source device {source}, not on {grad.device}."
    )
    summed = (
        "original.grad is not the sum of every replica's gradient (copy each one to the source "
        "device and add them all)."
    )
    torch.testing.assert_close(grad.cpu(), expected, rtol=1e-12, atol=1e-12, msg=summed)
    assert not any(wired["clone_grads"]), (
        "A clone received a gradient of its own: the only edge must lead to the original."
    )


class Tied(nn.Module):
    """An encoder and a decoder that share one weight matrix, as tied embeddings do."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(6, 4, bias=False)
        self.decode = nn.Linear(4, 6, bias=False)
        self.decode.weight = self.encode.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.encode(x)) @ self.decode.weight


def tied_replicas() -> dict[str, list[nn.Module]]:
    """Replicas of `Tied` on two devices made by each strategy (and libtorch's cloning)."""
    devices = _devices(2)
    torch.manual_seed(0)
    model = Tied().to(devices[0].torch_device)
    return {
        "broadcast": replicate(model, devices),
        "clone": clone_replicate(model, devices),
        "libtorch": [clone_module_by_module(model, d) for d in devices],
    }


@exercise("tied-weights", "Which strategy keeps tied weights tied?")
def check_tied_weights(prediction: dict[str, bool], shares_weight: Callable[[nn.Module], bool]):
    """``prediction[strategy]``: do its replicas keep the tie? ``shares_weight``: the test."""
    torch.manual_seed(0)
    untied = clone_module_by_module(Tied(), _devices(2)[0])  # equal values, two tensors
    assert shares_weight(Tied()) is True, (
        "shares_weight(Tied()) must be True: one tensor, two uses."
    )
    assert shares_weight(untied) is False, (
        "shares_weight() says True for two separate tensors that only hold equal values: "
        "tied means one tensor (one storage), not equal numbers."
    )
    replicas = tied_replicas()
    truth = {
        name: all(r.encode.weight is r.decode.weight for r in reps)
        for name, reps in replicas.items()
    }
    for name, reps in replicas.items():
        for i, replica in enumerate(reps):
            assert shares_weight(replica) is truth[name], (
                f"shares_weight() is wrong on replica {i} of the {name!r} strategy."
            )
    assert set(prediction) == set(truth), f"Predict exactly these strategies: {sorted(truth)}."
    wrong = [name for name in truth if prediction[name] is not truth[name]]
    assert not wrong, (
        f"Your prediction is wrong for {wrong}: run shares_weight on their replicas and "
        f"see which copy each tensor once and which once per module."
    )
