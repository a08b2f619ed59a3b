"""The differential test's cases, drawn by Hypothesis.

A `Case` holds everything one forward (and backward) needs, as plain tokens: the model,
the arguments (trees of tokens such as "batch" or "log", which `_diff_runs` makes into
fresh tensors and lists for every run), the devices, the output device, the batch
dimension, the grad mode and the form (class or function). Tokens, not devices: nothing
here may make a simulated device while pytest collects (conftest.py says why).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

Pair = namedtuple("Pair", "first second")


@dataclass
class Box:
    first: Any
    second: Any


MODELS = ("linear", "mlp", "batchnorm", "batchnorm-eval", "lstm")
MODES = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}
COMMON_INPUTS = ("batch", "batch", "text", "int", "none", "log")
RARE_INPUTS = ("scalar", "odd")  # a 0-dim tensor; a batch tensor with one row too many
OUTPUT_LEAVES = ("y", "y", "y2", "state", "sum", "none", "text")


@dataclass(frozen=True)
class Case:
    model: str
    unused: bool  # a parameter forward never uses: its gradient stays None on one device
    rank: int  # of every batch tensor: (rows, 3), or 3-D with the rows at `dim`
    dim: int
    rows: int
    device_ids: tuple[int, ...] | None  # None: every simulated device
    output_device: Any  # None, -1, "cpu", "cpu-device", "bare", ("id"|"name"|"device", k)
    mode: str
    form: str  # "class" (DataParallel) or "function" (data_parallel)
    args: tuple
    kwargs: dict
    outputs: Any  # a tree of OUTPUT_LEAVES
    inputs_on: str  # "cpu" or "sim:k"
    module_on: str  # "first" (device_ids[0], as it must be) or "cpu" (to be refused)

    @property
    def ids(self) -> list[int]:
        return list(range(4)) if self.device_ids is None else list(self.device_ids)

    @property
    def batch_at(self) -> int:
        return self.dim % self.rank

    @property
    def replicas(self) -> int:
        """How many replicas run: the pieces ``chunk`` makes (one device: the module)."""
        n = len(self.ids)
        return 1 if n == 1 else len(torch.empty(self.rows).chunk(n))


def children(tree: Any) -> list[Any]:
    if isinstance(tree, Box):
        return [tree.first, tree.second]
    if isinstance(tree, dict):
        return list(tree.values())
    return list(tree) if isinstance(tree, list | tuple) else []


def contains(tree: Any, *tokens: str) -> bool:
    if isinstance(tree, str):
        return tree in tokens
    return any(contains(c, *tokens) for c in children(tree))


def _trees(leaves: st.SearchStrategy, box: bool = False) -> st.SearchStrategy:
    containers = [
        lambda kids: st.lists(kids, max_size=2).map(tuple),
        lambda kids: st.lists(kids, max_size=2),
        lambda kids: st.dictionaries(st.sampled_from("abc"), kids, max_size=2),
        lambda kids: st.tuples(kids, kids).map(lambda t: Pair(*t)),
    ]
    if box:  # a dataclass, which only learn_parallel looks inside
        containers.append(lambda kids: st.tuples(kids, kids).map(lambda t: Box(*t)))
    return st.recursive(leaves, lambda kids: st.one_of([c(kids) for c in containers]), max_leaves=4)


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (the rare value last: Hypothesis favours the first)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def cases(draw: st.DrawFn) -> Case:
    model = draw(st.sampled_from(MODELS))
    dim = draw(st.sampled_from([0, 1, -2]))
    rank = 3 if model == "lstm" or dim == 1 else draw(st.sampled_from([2, 3]))
    rare = draw(one_in(10))  # deliberate differences, now and then
    leaves = st.sampled_from(COMMON_INPUTS + RARE_INPUTS if rare else COMMON_INPUTS)
    trees = _trees(leaves, box=draw(one_in(10)))
    args = tuple(draw(st.lists(trees, max_size=3)))
    kwargs = draw(st.dictionaries(st.sampled_from(["mask", "extra", "log"]), trees, max_size=2))
    if not contains((args, kwargs), "batch"):
        args = ("batch", *args)
    order = draw(st.permutations(range(4)))
    count = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["default", "id", "id", "name", "device", "other"]))
    if kind == "default":
        output_device = None
    elif kind == "other":
        output_device = draw(st.sampled_from([-1, -1, "bare", "cpu", "cpu-device", ("id", 7)]))
    else:
        output_device = (kind, draw(st.integers(0, 3)))
    outputs = draw(
        st.one_of(st.just("y"), _trees(st.sampled_from(OUTPUT_LEAVES), box=draw(one_in(4))))
    )
    return Case(
        model=model,
        unused=draw(st.booleans()),
        rank=rank,
        dim=dim,
        rows=draw(st.integers(1, 9)),
        device_ids=None if draw(one_in(8)) else tuple(order[:count]),
        output_device=output_device,
        mode=draw(st.sampled_from(list(MODES))),
        form=draw(st.sampled_from(["class", "function"])),
        args=args,
        kwargs=kwargs,
        outputs=outputs if contains(outputs, "y") else ("y", outputs),
        inputs_on=draw(st.sampled_from(["cpu", "sim:0", "sim:1", "sim:2", "sim:3"])),
        module_on="cpu" if draw(one_in(24)) else "first",
    )
