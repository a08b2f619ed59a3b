"""The differential test's runs: one case's step with learn_parallel, torch or one device.

`run` makes the case's module (`Probe`) and fresh arguments, does one forward (and a
backward where something needs a gradient) and returns what the test compares: the
output, the gradients of the parameters and of the input tensors, the buffers, the
caller's lists afterwards, the warnings about gathered scalars, or the error raised.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from _diff_cases import MODES, Box, Case, Pair, children
from torch import nn

import learn_parallel as lp


def output_device(token: Any) -> Any:
    """The ``output_device`` argument a token stands for (made only while a test runs)."""
    kinds = {"cpu-device": torch.device("cpu"), "bare": torch.device("sim")}
    if isinstance(token, tuple):
        kind, k = token
        return {"id": k, "name": f"sim:{k}", "device": torch.device("sim", k)}[kind]
    return kinds.get(token, token)


class Probe(nn.Module):
    """Adds up every batch tensor it is given, runs a small model, returns ``outputs``.

    It also appends its piece's row count to every list among its arguments, so the
    test sees whose list a replica was given.
    """

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.kind, self.outputs, self.batch_at = case.model, case.outputs, case.batch_at
        torch.manual_seed(0)
        if self.kind == "lstm":
            self.core = nn.LSTM(3, 4, batch_first=self.batch_at == 0)
        elif self.kind == "mlp":
            self.core = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        else:
            self.core = nn.Linear(3, 4 if "batchnorm" in self.kind else 2)
        self.norm = nn.BatchNorm1d(4) if "batchnorm" in self.kind else None
        if self.norm is not None and self.kind.endswith("eval"):
            self.norm.running_mean.uniform_(-1, 1), self.norm.running_var.uniform_(0.5, 2)
            self.eval()
        self.second = nn.Linear(3, 1)
        self.unused = nn.Linear(3, 1) if case.unused else None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        batched, scalars, lists = [], [], []
        _collect((args, kwargs), batched, scalars, lists)
        x = sum(batched[1:], batched[0])
        for scalar in scalars:
            x = x * (1 + scalar)
        for found in lists:
            found.append(x.shape[self.batch_at])
        if self.kind == "lstm":
            y, (state, _) = self.core(x)
            state = state.transpose(0, 1) if self.batch_at == 0 else state
        else:
            y = self.core(x)
            if self.norm is not None:
                y = self.norm(y.flatten(0, -2)).view_as(y)
            state = y.mean(-1, keepdim=True)
        parts = {"y": y, "y2": self.second(x), "state": state, "sum": y.sum()}
        return _build(self.outputs, {**parts, "none": None, "text": "tag"})


def _collect(tree: Any, batched: list, scalars: list, lists: list) -> None:
    if isinstance(tree, torch.Tensor):
        (batched if tree.dim() else scalars).append(tree)
        return
    if isinstance(tree, list):
        lists.append(tree)
    for child in children(tree):
        _collect(child, batched, scalars, lists)


def _build(spec: Any, parts: dict) -> Any:
    if isinstance(spec, str):
        return parts[spec]
    if isinstance(spec, Pair | Box):
        return type(spec)(*(_build(s, parts) for s in children(spec)))
    if isinstance(spec, dict):
        return {k: _build(s, parts) for k, s in spec.items()}
    return type(spec)(_build(s, parts) for s in spec)


@dataclass
class Made:
    """One run's fresh arguments, and the tensors and lists the test looks at afterwards."""

    leaves: list[torch.Tensor] = field(default_factory=list)
    lists: list[list] = field(default_factory=list)


def make(tree: Any, case: Case, made: Made, gen: torch.Generator) -> Any:
    """The argument a token tree stands for: fresh tensors (the same values every run)."""
    if isinstance(tree, str) and tree in ("batch", "odd", "scalar"):
        shape = [2] * case.rank
        shape[-1], shape[case.batch_at] = 3, case.rows + (tree == "odd")
        value = torch.randn(() if tree == "scalar" else shape, generator=gen)
        value = value.to(case.inputs_on).requires_grad_(case.mode == "grad")
        made.leaves.append(value)
        return value
    if isinstance(tree, str) and tree != "log":
        return {"text": "tag", "int": 3, "none": None}[tree]
    if tree == "log" or isinstance(tree, list):
        found = ["start"] if tree == "log" else [make(t, case, made, gen) for t in tree]
        made.lists.append(found)
        return found
    values = [make(t, case, made, gen) for t in children(tree)]
    if isinstance(tree, dict):
        return dict(zip(tree, values))
    return type(tree)(*values) if isinstance(tree, Pair | Box) else tuple(values)


@dataclass
class Result:
    error: BaseException | None = None
    output: Any = None
    grads: dict = field(default_factory=dict)  # parameter name -> gradient on the CPU, or None
    input_grads: list = field(default_factory=list)
    buffers: dict = field(default_factory=dict)
    lists: list = field(default_factory=list)  # the caller's lists, after the step
    scalar_warnings: int = 0


def run(case: Case, how: str) -> Result:
    """One step of ``case``: ``how`` is "ours", "torch" or "one" (the module on one device)."""
    module = Probe(case)
    source = torch.device("sim", case.ids[0])
    module.to(source if case.module_on == "first" or how == "one" else "cpu")
    made, gen = Made(), torch.Generator().manual_seed(1)
    args = tuple(make(a, case, made, gen) for a in case.args)
    kwargs = {k: make(v, case, made, gen) for k, v in case.kwargs.items()}
    result = Result()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with MODES[case.mode]():
                result.output = _forward(case, how, module, args, kwargs, source)
            loss = _loss(result.output)
            if loss is not None:
                loss.backward()
        except Exception as error:  # the test compares whether each raised
            result.error = error
    result.scalar_warnings = sum("scalar" in str(w.message) for w in caught)
    result.grads = {n: _cpu(p.grad) for n, p in module.named_parameters()}
    result.input_grads = [_cpu(leaf.grad) for leaf in made.leaves]
    result.buffers = {n: _cpu(b) for n, b in module.named_buffers()}
    result.lists = [unordered(found) for found in made.lists]
    return result


def _forward(case: Case, how: str, module: nn.Module, args: tuple, kwargs: dict, source):
    if how == "one":
        moved = lp.nested.map_tensors(lambda t: t.to(source), (args, kwargs))
        return module(*moved[0], **moved[1])
    device_ids = None if case.device_ids is None else list(case.device_ids)
    settings = {"output_device": output_device(case.output_device), "dim": case.dim}
    if case.form == "class":
        wrapper = lp.DataParallel if how == "ours" else torch.nn.DataParallel
        return wrapper(module, device_ids, **settings)(*args, **kwargs)
    function = lp.data_parallel if how == "ours" else torch.nn.parallel.data_parallel
    return function(module, args, device_ids, module_kwargs=kwargs or None, **settings)


def unordered(value: Any) -> str:
    """``value`` written out with each list's items sorted: replicas that share a list
    append to it in whatever order their threads run."""
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} on {value.device}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {unordered(v)}" for k, v in value.items()) + "}"
    items = [unordered(child) for child in children(value)]
    if isinstance(value, list):
        return f"[{', '.join(sorted(items))}]"
    return f"{type(value).__name__}({', '.join(items)})" if items else repr(value)


def tensors_of(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, str):
        return []
    return [t for child in children(tree) for t in tensors_of(child)]


def _loss(output: Any) -> torch.Tensor | None:
    """Squares of every batched output, plus per-replica sums as they are (linear, so
    their gradients are one device's too): None where nothing needs a gradient."""
    terms = [t.to("cpu") for t in tensors_of(output) if t.requires_grad]
    if not terms:
        return None
    return sum(t.sum() if t.dim() <= 1 else t.pow(2).sum() for t in terms)


def _cpu(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.detach().cpu()
