"""Checks for the parallel_apply chapter."""

from __future__ import annotations

import threading

import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.placement import same_places
from learn_parallel.classroom.role import judging
from learn_parallel.classroom.tools import forbid, learn_parallel_functions, machine


@exercise("papply-sequential", "parallel_apply without threads")
def sequential_apply(fn) -> str:
    here = machine()
    torch.manual_seed(0)
    m = nn.Linear(3, 2).to(here.source)
    threads: list[int] = []
    m.register_forward_pre_hook(lambda module, args: threads.append(threading.get_ident()))
    pieces = lp.scatter(torch.randn(9, 3, device=here.source), here.ids)
    reps = lp.replicate(m, here.ids[: len(pieces)])
    args = [(p,) for p in pieces]
    expected = lp.parallel_apply(reps, args)
    kw = [{"input": p} for p in pieces]
    threads.clear()
    with forbid(*learn_parallel_functions()):
        got = fn(reps, args)
        got_kw = fn(reps, [()] * len(pieces), kw)
    assert len(got) == len(expected), f"output count {len(got)}, expected {len(expected)}"
    same_places(got, expected, "output")
    same_places(got_kw, expected, "output (with kwargs_tup)")
    assert all(torch.equal(a, b) for a, b in zip(got, expected)), "outputs differ"
    assert len(got_kw) == len(expected) and all(
        torch.equal(a, b) for a, b in zip(got_kw, expected)
    ), "keyword inputs (kwargs_tup) were ignored"
    assert judging() or (threads and set(threads) == {threading.get_ident()}), (
        "the replicas must run one after the other in the caller's thread, with no other threads"
    )
    return f"{len(got)} replicas, in the caller's thread"


class PickyLookup(nn.Module):
    """Looks up a name in a table; only some names exist."""

    table = {"a": 1, "b": 2}

    def forward(self, key: str) -> int:
        return self.table[key]


@exercise("papply-which", "Which replica failed?")
def failed_replica(fn) -> str:
    here = machine()
    count = 12  # replicas may share devices; more than ten tests two-digit indices
    picky = [PickyLookup()] * count
    # Replica i runs on a device whose number is not i, so reading the device fails.
    devices = [here.ids[(count - 1 - i) % len(here.ids)] for i in range(count)]
    failing = (0, 1, 5, 11) + ((3, 7, 10) if grading() else ())
    for bad in failing:
        keys = [("a",)] * count
        keys[bad] = ("missing",)
        try:
            lp.parallel_apply(picky, keys, devices=devices)
        except KeyError as error:
            got = fn(error)
            assert got == bad and isinstance(got, int), (
                f"replica {bad} failed, but failed_replica says {got!r}"
            )
        else:
            raise AssertionError("parallel_apply did not raise")  # the check's own mistake
    return f"replicas {', '.join(map(str, failing))} of {count}"
