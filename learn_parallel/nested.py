"""Nested structures of tensors: the containers scatter, gather and the options walk.

A batch or an output is often a structure: tuples, lists, dicts, namedtuples
and dataclasses holding tensors (or more containers). Every module that splits,
joins or moves such a structure uses the few functions here, so they all agree
on what a container is and how to rebuild one.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch


def is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def members(obj: Any) -> list[tuple[str, Any]] | None:
    """(path suffix, value) pairs of a container we know how to split, else None."""
    if is_namedtuple(obj):
        return [(f".{name}", getattr(obj, name)) for name in obj._fields]
    if isinstance(obj, tuple | list):
        return [(f"[{i}]", value) for i, value in enumerate(obj)]
    if isinstance(obj, dict):
        return [(f"[{key!r}]", value) for key, value in obj.items()]
    if is_dataclass_instance(obj):
        return [(f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    return None


def rebuild(obj: Any, values: Sequence[Any]) -> Any:
    """A copy of container ``obj`` holding ``values`` in place of its members."""
    if is_namedtuple(obj):
        return type(obj)(*values)
    if isinstance(obj, tuple | list):
        return type(obj)(values)
    if isinstance(obj, dict):
        rebuilt = copy.copy(obj)  # keeps the dict subclass (OrderedDict, defaultdict ...)
        rebuilt.update(zip(obj.keys(), values))
        return rebuilt
    rebuilt = copy.copy(obj)  # a dataclass; object.__setattr__ also works when frozen
    for field, value in zip(dataclasses.fields(obj), values):
        object.__setattr__(rebuilt, field.name, value)
    return rebuilt


def tensors(obj: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside ``obj`` with its path, depth first, in member order."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    for suffix, value in members(obj) or []:
        yield from tensors(value, path + suffix)


def map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """A copy of ``obj`` with ``fn(t)`` in place of every tensor ``t``; other leaves kept."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    found = members(obj)
    if not found:
        return obj
    return rebuild(obj, [map_tensors(fn, value) for _, value in found])


def check_alike(values: Sequence[Any], path: str, verb: str = "gather") -> None:
    """Raise unless the containers in ``values`` have one type, one size and (dicts) one key set.

    ``verb`` names what was being done with them ("gather", "collect") in the message.
    """
    first = values[0]
    if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
        keys = [set(v.keys()) for v in values]
        if any(k != keys[0] for k in keys):
            differing = sorted(map(repr, set.union(*keys) - set.intersection(*keys)))
            appear = "appears" if len(differing) == 1 else "appear"
            raise ValueError(
                f"Cannot {verb} {path}: all dicts must have the same keys, but "
                f"{', '.join(differing)} {appear} only in some replicas' outputs."
            )
    size = len(members(first) or [])
    if any(type(v) is not type(first) or len(members(v) or []) != size for v in values):
        raise TypeError(
            f"Cannot {verb} {path}: replicas returned different structures "
            f"({', '.join(type(v).__name__ for v in values)})."
        )
