"""What every equivalence test does: train (SGD with momentum) and compare two runs tensor
by tensor, in float64."""

from __future__ import annotations

from collections.abc import Sequence

import torch

TOL = {"rtol": 1e-10, "atol": 1e-12}


class SimDevices(Sequence):
    """``torch.device("sim", i)`` for ``i < count``, made on first use, never at import.

    Making one registers the simulated device type with PyTorch, and after that CUDA's
    autograd fails in the same process (an internal assert in the engine; the devices
    chapter shows it). A module constant made at import would do it while pytest
    collects, before any GPU test of the same run (conftest refuses that, and runs the
    GPU tests before the others).
    """

    def __init__(self, count: int = 4) -> None:
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __eq__(self, other: object) -> bool:  # compares like the list it stands for
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None

    def __getitem__(self, index):
        from learn_parallel.devices import Device

        if isinstance(index, slice):
            return [self[i] for i in range(self._count)[index]]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return Device("sim", index % self._count).torch_device


def conv_net(batch_norm: bool = False) -> torch.nn.Module:
    """A small float64 conv net (with BatchNorm if asked), the same weights every call."""
    from torch import nn

    torch.manual_seed(0)
    norm = [nn.BatchNorm2d(8)] if batch_norm else []
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        *norm,
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 3),
    ).double()


def assert_same(a, b, tol: dict[str, float] = TOL) -> None:
    """Equal nested structures of tensors (outputs, gradients, parameters) within ``tol``.

    The parallel side may live on another device than the reference: both are compared
    on the host.
    """
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a.cpu(), b.cpu(), **tol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key], tol)
    else:
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, tol)


def train(model, run, batches, lr: float = 0.1) -> tuple[list, list[torch.Tensor]]:
    """SGD with momentum 0.9 over ``batches``; ``run(batch)`` is one forward: (output, loss).

    Returns what `assert_same` compares: per step the output and the parameters'
    gradients, then the final parameters (all copies).
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    history = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        output, loss = run(batch)
        loss.backward()
        history.append((_copy(output), [p.grad.clone() for p in model.parameters()]))
        optimizer.step()
    return history, [p.detach().clone() for p in model.parameters()]


def _copy(obj):
    """A detached copy of a tensor, or of every tensor in a nested dict, list or tuple."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {key: _copy(value) for key, value in obj.items()}
    return [_copy(value) for value in obj]


def train_like_ddp(model, batches, count: int, loss_fn, optimizer, gathered: bool = False):
    """One-device training with DDP's semantics over ``count`` devices; returns the losses.

    Each batch is split into ``count`` pieces (``split_batch``), each run through the
    model (BatchNorm normalises per piece, as on each replica); the loss is the mean of
    the pieces' losses (``gathered``: one loss over the joined outputs); after the step
    the buffers are those the first piece left (DDP broadcasts rank 0's before every
    forward, so the other ranks' updates never last).
    """
    from learn_parallel.variants import split_batch

    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        outputs, piece_losses, kept = [], [], []
        for xi, yi in split_batch((x, y), count):
            outputs.append(model(xi))
            piece_losses.append(loss_fn(outputs[-1], yi))
            kept = kept or [b.clone() for b in model.buffers()]  # after replica 0's piece
        loss = loss_fn(torch.cat(outputs), y) if gathered else sum(piece_losses) / count
        loss.backward()
        with torch.no_grad():
            for buffer, value in zip(model.buffers(), kept):
                buffer.copy_(value)
        optimizer.step()
        losses.append(loss.detach())
    return losses
