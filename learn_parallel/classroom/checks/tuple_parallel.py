"""Checks for the TupleParallel chapter."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader

import learn_parallel as lp
from learn_parallel.classroom import exercise
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.placement import Moves
from learn_parallel.classroom.tools import forbid, learn_parallel_functions, machine


def _items(rows: int) -> list[dict]:
    return [
        {"x": torch.full((3,), float(i)), "label": i % 3, "name": f"row{i}"} for i in range(rows)
    ]


@exercise("tuple-parallel-dict-collate", "A collate function for dicts")
def collate_dicts(fn) -> str:
    here = machine()
    with forbid(*learn_parallel_functions()):
        for n in range(1, 6):
            for rows in range(n, 13):
                items, pieces = _items(rows), fn(_items(rows), n)
                assert isinstance(pieces, tuple) and len(pieces) == n, (
                    f"{rows}-row batch, n={n}: expected a tuple of {n} dicts"
                )
                index_pieces = torch.arange(rows).tensor_split(n)
                for k, (piece, index) in enumerate(zip(pieces, index_pieces)):
                    where = f"{rows}-row batch, n={n}, piece {k}"
                    x = torch.stack([items[i]["x"] for i in index])
                    assert torch.equal(piece["x"], x), f"{where}: wrong x"
                    labels = torch.tensor([items[i]["label"] for i in index])
                    assert torch.equal(piece["label"], labels), f"{where}: wrong labels"
                    names = [items[i]["name"] for i in index]
                    assert piece["name"] == names, f"{where}: wrong names {piece['name']}"
        try:
            fn(_items(2), 3)
        except ValueError:
            pass
        else:
            raise AssertionError("2 items for 3 devices should raise ValueError")
        # And it feeds TupleParallel straight from a DataLoader.
        n, rows = len(here.devices), 6 * len(here.devices)
        batches = list(
            DataLoader(_items(rows), batch_size=2 * n, collate_fn=lambda items: fn(items, n))
        )
    identity = lp.TupleParallel(nn.Identity().to(here.source))
    total = sum(int(out["label"].sum()) for pieces in batches for out in identity(pieces))
    assert total == sum(i % 3 for i in range(rows)), "labels were lost or duplicated on the way"
    return "every split from 1 to 12 rows, and through a DataLoader"


def _loss_and_gradients(fn, outs: list, ts: list, source: torch.device) -> dict:
    """Run the answer where it lives, then backward from its loss: all of it as data."""
    with Moves() as moves, forbid((torch, "cat"), *learn_parallel_functions()):
        got = fn(outs, ts, source)
    moved = [tuple(s) for s in moves.moved_non_scalars_with_grad()]
    if moved or not isinstance(got, torch.Tensor) or got.dim() != 0:
        return {"moved": moved, "loss": got, "grads": None}
    got.backward()
    grads = [o.grad if o.grad is not None else torch.zeros_like(o) for o in outs]
    return {"moved": moved, "loss": got, "grads": grads}


@exercise("tuple-parallel-loss", "Cross-entropy per device")
def cross_entropy_per_device(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    for pieces in (2, 3, 4):
        for rows in (9, 10, 11):
            logits = torch.randn(rows, 5, dtype=torch.float64)
            labels = torch.randint(5, (rows,))
            labels[::4] = -100
            labels[-(rows // pieces) :] = -100  # the last piece holds only ignored labels
            places = [here.devices[k % len(here.devices)].torch_device for k in range(pieces)]
            outs = [
                p.to(d).detach().requires_grad_()
                for p, d in zip(logits.tensor_split(pieces), places)
            ]
            ts = [t.to(d) for t, d in zip(labels.tensor_split(pieces), places)]
            where = f"{rows} rows in {pieces} pieces"
            answer = observe(_loss_and_gradients, fn, outs, ts, here.source)
            got, moved = answer["loss"], answer["moved"]
            assert not moved, (
                f"{where}: whole logits of shape {tuple(moved[0])} were copied between "
                f"devices; compute each device's part where it is and move only scalars"
            )
            assert got.device == here.source and got.dim() == 0, (
                "return a scalar on the source device"
            )
            whole = logits.clone().requires_grad_()
            expected = nn.functional.cross_entropy(whole, labels)
            assert torch.allclose(got.cpu(), expected), (
                f"{where}: expected {expected.item():.6f}, got {got.item():.6f}"
            )
            expected.backward()
            grads = torch.cat([g.cpu() for g in answer["grads"]])
            assert torch.allclose(grads, whole.grad), f"{where}: gradients differ"
    return "9-11 rows in 2-4 pieces, value and gradients"
