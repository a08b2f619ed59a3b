"""Checks for the gather chapter."""

from __future__ import annotations

import torch

import learn_parallel as lp
from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.placement import Moves, same_places
from learn_parallel.classroom.tools import forbid, learn_parallel_functions, machine


@exercise("gather-mean", "The batch's mean loss")
def batch_mean(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    for rows in (8, 10, 3, 1) + ((13, 7) if grading() else ()):
        per_row = torch.rand(rows, device=here.source)
        # One mean per replica, gathered onto the source device as DataParallel would.
        losses = lp.gather(
            [p.mean(0, keepdim=True) for p in lp.scatter(per_row, here.ids)], here.source
        )
        got, expected = fn(losses, rows), per_row.mean()
        assert torch.allclose(torch.as_tensor(got), expected), (
            f"{rows}-row batch: got {float(got):.4f}, expected {expected:.4f}"
        )
    return "every batch size weighs its slices right"


@exercise("gather-pairs", "Gather pairs by hand")
def gather_pairs(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    outs = [
        (
            torch.randn(n, 3, device=here.torch_device(k % len(here.ids))),
            torch.randn(n, 5, device=here.torch_device(k % len(here.ids))),
        )
        for k, n in enumerate((3, 3, 2))
    ]
    target = torch.device("cpu")
    expected = lp.gather(outs, target)
    with Moves() as moves, forbid(*learn_parallel_functions()):
        got = fn(outs, target)
    assert isinstance(got, tuple) and len(got) == 2, f"expected a pair, got {type(got).__name__}"
    same_places(got, expected, "joined tensor")
    assert all(torch.equal(g, e) for g, e in zip(got, expected)), "joined tensors differ"
    for k, pair in enumerate(outs):
        for part in pair:
            assert moves.sent(part, target), (
                f"replica {k}'s output was joined without being copied to {target}: "
                f"call .to(target) on each part before torch.cat"
            )
    return str([tuple(t.shape) for t in got])
