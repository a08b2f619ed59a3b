"""Run as a script: CPU-only code, printing what it sees, with ``import learn_parallel``
first when argv[1] is "lp". The rest of argv names torch attributes whose objects it
describes (the simulator's first-use rows). Both runs must print the same lines; the "lp"
run then adds whether the simulator was installed (it must not be), and what
``torch.accelerator`` answers (as the simulator's table says).
"""

from __future__ import annotations

import importlib
import io
import sys
import warnings

import torch

if sys.argv[1] == "lp":
    import learn_parallel  # noqa: F401

import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402


def show(name: str, probe) -> None:
    try:
        seen = probe()
    except Exception as error:  # what kind of error, and its first words
        kind = "RuntimeError" if isinstance(error, RuntimeError) else type(error).__name__
        seen = f"raises {kind}"
    print(f"{name}: {seen}")


def owner_of(dotted: str) -> object:
    """The module or class a dotted path names (its longest importable part, then attributes:
    ``torch.nn.parallel.data_parallel`` is the module, not the function it exports)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            owner = getattr(owner, part)
        return owner
    raise ImportError(dotted)


def describe(path: str) -> str:
    owner_path, _, name = path.rpartition(".")
    owner = owner_of(owner_path)
    if name not in vars(owner):
        return "absent"
    value = vars(owner)[name]
    return f"{type(value).__name__} {getattr(value, '__module__', '')} {value!r:.60}"


for path in sys.argv[2:]:
    show(path, lambda path=path: describe(path).split(" at 0x")[0])

show("Generator", lambda: (torch.Generator is torch._C.Generator, type(torch.Generator())))
show("draws", lambda: torch.randn(3, generator=torch.Generator().manual_seed(1)).tolist())
show("seeded", lambda: (torch.manual_seed(5).initial_seed(), torch.rand(2).tolist()))


def swap() -> list:
    a, b = torch.ones(2), torch.zeros(2)
    torch.utils.swap_tensors(a, b)
    return a.tolist()


def swap_saved() -> None:
    a = torch.ones(2, requires_grad=True)
    y = (a * a).sum()  # the graph saves a
    torch.utils.swap_tensors(a, torch.zeros(2, requires_grad=True))
    y.backward()


show("swap", swap)
show("swap saved", swap_saved)


class Wrong(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad[:1]  # the wrong shape: torch's own check refuses it


x = torch.ones(2, requires_grad=True)
show("Function", lambda: Wrong.apply(x).sum().backward())
show("grad", lambda: torch.autograd.grad((x * x).sum(), x)[0].tolist())
show("checkpoint", lambda: checkpoint(torch.sin, x, use_reentrant=False).sum().item())

accelerator = torch.accelerator
show("accelerator", lambda: (accelerator.is_available(), accelerator.device_count()))
show("checked accelerator", lambda: accelerator.current_accelerator(check_available=True))
show("device type", torch._utils._get_available_device_type)
show("comm", lambda: torch.nn.parallel.comm.broadcast_coalesced([torch.ones(2)], [0]))
show("nccl", lambda: torch.cuda.nccl.is_available([torch.ones(2)]))
show("DataParallel", lambda: torch.nn.DataParallel(torch.nn.Linear(2, 3))(torch.ones(4, 2)).shape)
show("pin_memory", lambda: torch.ones(2).pin_memory())
show("is_pinned", lambda: torch.ones(2).is_pinned())
show("lazy", lambda: torch.nn.LazyLinear(3)(torch.ones(2, 5)).shape)


def loader() -> tuple:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = next(iter(torch.utils.data.DataLoader([torch.ones(2)] * 2, pin_memory=True)))
    return batch.is_pinned(), [str(w.message)[:40] for w in caught]


def saved() -> list:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3)}, buffer)
    buffer.seek(0)
    return torch.load(buffer)["w"].tolist()


show("DataLoader", loader)
show("save and load", saved)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    F.mse_loss(torch.ones(3, 1), torch.ones(3))
    F.mse_loss(torch.ones(3, 1), torch.ones(3))
print("warnings at", [(w.filename.rpartition("/")[2], w.lineno) for w in caught])

if sys.argv[1] == "lp":  # then what the simulator's table says of torch.accelerator
    patches = importlib.import_module("learn_parallel.sim.patches")
    print("installed:", patches.installed())
    print(accelerator.current_accelerator(), accelerator.is_available(), accelerator.device_count())
    print(accelerator.current_device_index(), patches.installed(), accelerator.device_count())
