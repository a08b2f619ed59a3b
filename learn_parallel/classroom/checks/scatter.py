"""Checks for the scatter chapter."""

from __future__ import annotations

import torch

import learn_parallel as lp
from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.placement import Moves
from learn_parallel.classroom.tools import forbid, learn_parallel_functions, machine

_CHUNK = ((torch, "chunk"), (torch.Tensor, "chunk"))


@exercise("scatter-sizes", "Piece sizes")
def chunk_sizes(fn) -> str:
    most_rows, most_devices = (200, 16) if grading() else (40, 8)
    cases = [
        (rows, devices, [len(c) for c in torch.arange(rows).chunk(devices)])
        for rows in range(1, most_rows)
        for devices in range(1, most_devices + 1)
    ]
    with forbid(*_CHUNK, *learn_parallel_functions()):
        for rows, devices, expected in cases:
            got = fn(rows, devices)
            assert got == expected, (
                f"chunk_sizes({rows}, {devices}): expected {expected}, got {got}"
            )
    return f"every batch of 1-{most_rows - 1} rows on 1-{most_devices} devices"


@exercise("scatter-dict", "Scatter a dict by hand")
def split_batch(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    for rows in (1, 3, 10):
        batch = {
            "x": torch.randn(rows, 2, device=here.source),
            "y": torch.arange(rows, device=here.source),
        }
        expected = lp.scatter(batch, here.ids)
        with Moves() as moves, forbid(*learn_parallel_functions()):
            got = fn(batch, here.ids)
        assert len(got) == len(expected), (
            f"{rows}-row batch: piece count {len(got)}, expected {len(expected)}"
        )
        for i, (e, g) in enumerate(zip(expected, got)):
            assert isinstance(g, dict) and e.keys() == g.keys(), (
                f"{rows}-row batch, piece {i}: expected a dict with keys {sorted(e)}"
            )
            for key in e:
                where, wanted = f"{rows}-row batch, piece {i}", here.torch_device(i)
                assert isinstance(g[key], torch.Tensor), f"{where}: {key!r} is not a tensor"
                assert g[key].device == wanted, (  # before comparing: equal() mixes devices
                    f"{where}: {key!r} is on {g[key].device}, expected {wanted} "
                    f"(use .to(the device's torch_device))"
                )
                assert torch.equal(e[key], g[key]), f"{where}: wrong {key!r}"
                assert moves.placed(g[key], wanted), (
                    f"{where}: {key!r} was not sent to device {here.devices[i]} "
                    f"(use .to(the device's torch_device))"
                )
    return "pieces match lp.scatter and sit on their devices, for 1, 3 and 10 rows"
