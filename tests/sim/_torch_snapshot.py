"""Run as a script: which of torch's attributes change at ``import learn_parallel``, and
which at the simulator's first use (``torch.nn.Linear(20, 5).to("sim:1")``).

The torch modules the package and its first use import are imported first (argv[1:]),
so that the snapshot holds them; then every attribute of every torch module (and of
``warnings``), and of every class they define, is recorded by identity before the import,
after it and after the first use. Prints one JSON object: ``{"import": [...],
"first use": [...]}``, each attribute named ``module.attribute`` or
``module.Class.attribute``; and, at each of the three points, the registrations that
have no attribute (`registrations`). Two kinds of caches that torch and Python fill on first access
are left out: ``torch.ops``' namespaces (``torch.ops.aten.add`` is made when first read)
and ``__slotnames__`` (``copyreg`` stores it on a class the first time one is copied).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
import warnings

import torch


def modules() -> list[types.ModuleType]:
    found = [m for n, m in list(sys.modules.items()) if n.startswith("torch") and m is not None]
    found.append(warnings)
    for module in list(found):  # C submodules (torch._C._nn) are not all in sys.modules
        found += [v for v in vars(module).values() if isinstance(v, types.ModuleType)]
    return list({id(m): m for m in found}.values())


def snapshot() -> dict[str, object]:
    seen: dict[str, object] = {}  # the objects themselves: an id could be reused
    for module in modules():
        name = getattr(module, "__name__", "?")
        if name == "torch.ops" or name.startswith("torch.ops."):
            continue
        for attr, value in list(vars(module).items()):
            seen[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    if cattr != "__slotnames__":
                        seen[f"{name}.{value.__qualname__}.{cattr}"] = cvalue
    return seen


def changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    owners = {key.rpartition(".")[0] for key in before}
    moved = {k for k, v in before.items() if k not in after or after[k] is not v}
    added = {k for k in after if k not in before and k.rpartition(".")[0] in owners}
    return sorted(moved | added)


warnings.simplefilter("ignore")  # reading every attribute wakes torch's deprecation warnings
for name in sys.argv[1:]:
    importlib.import_module(name)


def registrations() -> dict:
    """The rows without attributes: torch.serialization's packages, pinning on the CPU."""
    try:
        pinned = str(torch.ones(2).pin_memory().device)
    except RuntimeError:
        pinned = "refused"
    return {"packages": len(torch.serialization._package_registry), "pin_memory": pinned}


first, first_registrations = snapshot(), registrations()
import learn_parallel  # noqa: E402,F401

imported, imported_registrations = snapshot(), registrations()
torch.nn.Linear(20, 5).to("sim:1")
used = snapshot()
changes = {"import": changed(first, imported), "first use": changed(imported, used)}
changes["registrations"] = [first_registrations, imported_registrations, registrations()]
print(json.dumps(changes))
