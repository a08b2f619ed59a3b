"""What the checks share: this machine's devices, forbidding a call, and spying on one
(`placement` tells whether a tensor was really sent to its device).

Checks never read a notebook's globals; they find the devices here, exactly as a
chapter's setup cell does. The spies watch the student's code as it runs, so while the
grader replays recorded answers (`role.judging`) they have nothing to watch and let the
replay through: the kernel's run of the same check applied them.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from learn_parallel.classroom.role import judging
from learn_parallel.devices import (
    Device,
    device_count,
    device_type,
    simulate_for_lessons,
)


@dataclass(frozen=True)
class Machine:
    """This machine's devices, as the chapters' setup cell names them."""

    kind: str
    ids: list[int]
    devices: list[Device]

    @property
    def source(self) -> torch.device:
        """Where a model and its batch start out (the first device)."""
        return self.devices[0].torch_device

    def torch_device(self, index: int) -> torch.device:
        return Device(self.kind, index).torch_device


def machine() -> Machine:
    """The devices the checks use: GPUs where there are two or more, else simulated ones."""
    simulate_for_lessons(2)  # one GPU (Colab) or none: check on simulated devices
    kind = device_type()
    ids = list(range(device_count()))
    return Machine(kind, ids, [Device(kind, i) for i in ids])


# --------------------------------------------------------------------------
# Forbidding a call: the exercise says "without calling X", the check makes X raise
# --------------------------------------------------------------------------


class ForbiddenCall(AssertionError):
    pass


_forbidden_hits: list[str] = []


def _hit(name: str) -> None:
    _forbidden_hits.append(name)
    raise ForbiddenCall(f"your answer calls {name}, which this exercise asks you not to use")


def _code_calling(call: str, original: types.CodeType) -> types.CodeType:
    """A code object whose body is ``call`` (a statement using ``args``/``kwargs``), with the
    same free variables as ``original``: it can be swapped into the function itself, so it
    catches every alias of that function."""
    free = original.co_freevars
    inner = "\n".join(
        [
            "def _outer():",
            *[f"    {v} = None" for v in free],
            "    def _swapped(*args, **kwargs):",
            *[f"        {v}" for v in free],
            "        from learn_parallel.classroom import tools",
            f"        {call}",
            "    return _swapped",
        ]
    )
    namespace: dict[str, Any] = {}
    exec(inner, namespace)
    return namespace["_outer"]().__code__


def _raiser_code(name: str, original: types.CodeType) -> types.CodeType:
    """A code object that reports ``name`` (see `_code_calling`)."""
    return _code_calling(f"tools._hit({name!r})", original)


@contextlib.contextmanager
def forbid(*targets: Any) -> Iterator[None]:
    """Make each target raise `ForbiddenCall` while the block runs.

    A target is a Python function or method (its code is swapped, so every alias
    of it, ``from learn_parallel import scatter`` included, is caught), a class
    (its own ``forward``, ``apply`` and ``__call__`` are forbidden), or an ``(owner, "name")`` pair
    for a builtin such as ``(torch, "chunk")``. After the block, a forbidden call
    that the answer swallowed still fails the check.
    """
    if judging():
        yield
        return
    swapped: list[tuple[Callable, types.CodeType]] = []
    torch_functions: dict[Any, str] = {}
    expanded: list[Any] = []
    for target in targets:
        if isinstance(target, type):
            methods = ("forward", "apply", "__call__")
            expanded += [(target, attr) for attr in methods if attr in vars(target)]
        else:
            expanded.append(target)
    for target in expanded:
        if isinstance(target, tuple):
            owner, name = target
            original = getattr(owner, name)
            function = getattr(original, "__func__", original)
            if not isinstance(function, types.FunctionType):
                # A torch builtin: caught by a TorchFunctionMode, whatever it is called.
                torch_functions[original] = f"{getattr(owner, '__name__', owner)}.{name}"
                continue
            target = function
        label = f"{target.__module__}.{target.__qualname__}"
        swapped.append((target, target.__code__))
        target.__code__ = _raiser_code(label, target.__code__)
    before = len(_forbidden_hits)
    try:
        with _ForbidTorch(torch_functions):
            yield
    finally:
        for function, code in swapped:
            function.__code__ = code
    hits = _forbidden_hits[before:]
    del _forbidden_hits[before:]
    if hits:
        raise ForbiddenCall(f"your answer calls {hits[0]}, which this exercise asks you not to use")


class _ForbidTorch(TorchFunctionMode):
    def __init__(self, forbidden: dict[Any, str]) -> None:
        super().__init__()
        self.forbidden = forbidden

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.forbidden:
            _hit(self.forbidden[func])
        return func(*args, **(kwargs or {}))


_NOT_TAUGHT_HERE = {"Device", "device_count", "device_type"}  # finding devices is always allowed


def learn_parallel_functions() -> list[Any]:
    """Every public function and class of the package's core modules, for exercises
    that say "no learn_parallel calls"."""
    import learn_parallel as lp

    found = []
    for name in lp.__all__:
        if name in _NOT_TAUGHT_HERE:
            continue
        obj = getattr(lp, name)
        if isinstance(obj, types.FunctionType | type):
            found.append(obj)
    from learn_parallel import scatter_gather

    found += [scatter_gather.Scatter, scatter_gather.Gather]
    return found


# --------------------------------------------------------------------------
# Spying: was a function called at all (e.g. "use lp.scatter")?
# --------------------------------------------------------------------------


@dataclass
class Spy:
    calls: dict[str, int] = field(default_factory=dict)


_spied: dict[str, tuple[Spy, Callable]] = {}


def _spied_call(label: str, args: tuple, kwargs: dict) -> Any:
    record, original = _spied[label]
    record.calls[label] += 1
    return original(*args, **kwargs)


def _counting_code(label: str, original: types.CodeType) -> types.CodeType:
    return _code_calling(f"return tools._spied_call({label!r}, args, kwargs)", original)


@contextlib.contextmanager
def spy(**functions: Callable) -> Iterator[Spy]:
    """Count the calls of each ``label=function`` while the block runs, through any alias."""
    if judging():  # the kernel counted the calls; the replay makes none
        yield Spy({label: 1 for label in functions})
        return
    record = Spy({label: 0 for label in functions})
    swapped = []
    for label, function in functions.items():
        function = getattr(function, "__func__", function)
        copy = types.FunctionType(
            function.__code__,
            function.__globals__,
            function.__name__,
            function.__defaults__,
            function.__closure__,
        )
        copy.__kwdefaults__ = function.__kwdefaults__
        _spied[label] = (record, copy)
        swapped.append((function, function.__code__, label))
        function.__code__ = _counting_code(label, function.__code__)
    try:
        yield record
    finally:
        for function, code, label in swapped:
            function.__code__ = code
            _spied.pop(label, None)
