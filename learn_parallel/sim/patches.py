"""Everything the simulator changes in torch, when, and why: one table, and its installer.

`PATCHES` is the table the devices chapter shows (`markdown`); a test checks it against
torch itself. The `IMPORT` rows make ``sim`` a device torch parses, dispatches to and loads
onto (`learn_parallel.sim.backend` makes them when learn_parallel is imported on a machine
without GPUs; beside a GPU, at the first use); for anything else they do what torch does.
The others would change what CPU-only code sees, so `install` makes them at the *first
use*: the first tensor made on a simulated device (`learn_parallel.sim.creation`), torch
initializing ``sim`` (``torch.sim._lazy_init``), a function of ``torch.sim`` that acts on
a device, or `learn_parallel.sim.enable`.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import torch
from torch.utils.backend_registration import generate_methods_for_privateuse1_backend

from learn_parallel.sim import generators, grads, moves, torch_parallel, warning_frames
from learn_parallel.sim.device_ids import follow_current_device

IMPORT = "import"
FIRST_USE = "first use"


@dataclass(frozen=True)
class Patch:
    """One change to torch: what the table shows, when it is made, why, and the torch
    attributes it replaces or adds (dotted paths, ``Owner.*`` for several of one owner;
    none for a registration)."""

    what: str
    when: str
    why: str
    attributes: tuple[str, ...] = ()


_COMM = ("broadcast", "broadcast_coalesced", "scatter", "gather")
_NCCL = ("is_available", "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter")
_ACCELERATOR = ("getDeviceIndex", "setDeviceIndex", "exchangeDevice", "maybeExchangeDevice")

PATCHES = (
    Patch(
        "PyTorch's device type for out-of-tree backends (`PrivateUse1`) named `sim`, with the "
        "C++ device guard and hooks of torch's helper for backends written in Python (torch "
        "adds the name to its `DeviceType` and `ProfilerActivity` enums)",
        IMPORT,
        "`torch.device('sim:1')` and `x.to('sim:1')` parse and reach the kernels below. torch "
        "then takes `sim` for its accelerator: `torch.accelerator.current_accelerator()` names "
        "it; `current_device_index()` initializes it (a first use) instead of raising; "
        "`pin_memory()` fails with torch's message about `PrivateUse1` hooks instead of "
        '"Cannot access accelerator device when none is available"',
        ("torch.utils.backend_registration._privateuse1_backend_name",)
        + ("torch._C._autograd.DeviceType.*", "torch._C._profiler.ProfilerActivity.*"),
    ),
    Patch(
        "`torch.sim`, the device module",
        IMPORT,
        "what torch asks a backend for (device count, current device, seeds, random states, "
        "memory counters); `torch.manual_seed` seeds the simulated devices through it. Until "
        "the first use it answers `is_available()` False and `device_count()` 0, as a machine "
        "without accelerator does",
        ("torch.sim",),
    ),
    Patch(
        "kernels for `sim` tensors: `empty`, `empty_strided`, `_copy_from`, `arange`, "
        "`linspace`, `logspace`, `eye`; autocast's step for `sim` passes through",
        IMPORT,
        "where a simulated tensor is made; registered for `sim`'s dispatch key only, so CPU "
        "tensors never reach them. The first to run installs every first-use row",
    ),
    Patch(
        "a `torch.serialization` package for `sim`",
        IMPORT,
        "`torch.load(f, map_location='sim:1')` rebuilds tensors on a simulated device (and is "
        "a first use); torch's own rule for the renamed backend would ask `torch.sim`, which "
        "is not available before the first use. For any other location it answers nothing, "
        "and torch's own rules apply",
    ),
    Patch(
        "`UninitializedTensorMixin.__torch_function__`",
        IMPORT,
        "a lazy module's uninitialized parameters and buffers can move onto a simulated "
        "device. torch picks this function before the move starts, so it must be in place "
        "before a first use that is such a move; for any other move it runs torch's own",
        ("torch.nn.parameter.UninitializedTensorMixin.__torch_function__",),
    ),
    Patch(
        "`Tensor.sim()`, `Tensor.is_sim`, `Module.sim()`, `PackedSequence.sim()`, `.is_sim`",
        FIRST_USE,
        "`x.sim()` as `x.cuda()`: the methods torch generates for a renamed backend (so "
        "`x.sim()` cannot be the first use)",
        ("torch.Tensor.sim", "torch.Tensor.is_sim", "torch.nn.Module.sim")
        + ("torch.nn.utils.rnn.PackedSequence.sim", "torch.nn.utils.rnn.PackedSequence.is_sim"),
    ),
    Patch(
        "the CPU kernel of `aten::_pin_memory`",
        FIRST_USE,
        "torch pins for its accelerator, now `sim`, which has no pinned memory: beside a GPU "
        "this pins for CUDA, without one a pinned copy is a plain copy",
    ),
    Patch(
        "`torch.autograd._engine_run_backward` (and `torch.autograd.graph`'s)",
        FIRST_USE,
        "backward runs on the calling thread (torch sizes its per-device threads by the one "
        "device a Python backend reports); an exception from a hook on a simulated tensor is "
        "raised from `backward()`; gradients given to `backward()` are checked against their "
        "outputs' devices; CUDA's backward in the same process gets a one-line error",
        ("torch.autograd._engine_run_backward", "torch.autograd.graph._engine_run_backward"),
    ),
    Patch(
        "`BackwardCFunction.apply`",
        FIRST_USE,
        "what a custom `autograd.Function`'s backward returns is checked against its inputs' "
        "devices, as CUDA's engine does (it skips tensor subclasses)",
        ("torch.autograd.function.BackwardCFunction.apply",),
    ),
    Patch(
        "`torch.Generator`",
        FIRST_USE,
        "`torch.Generator(device='sim:1')` makes that device's generator (torch asks a C++ "
        "backend for new ones); any other device gets torch's own class. Before the first "
        "use, torch's class refuses `sim` (its message about `getNewGenerator`)",
        ("torch.Generator",),
    ),
    Patch(
        "four `torch._C._accelerator_*` functions and `torch._C._nn._parse_to`",
        FIRST_USE,
        "`torch.accelerator`'s current device and `module.to('sim')` follow this thread's "
        "simulated device (torch's helper gives a Python backend a C++ guard fixed at 0)",
        tuple(f"torch._C._accelerator_{name}" for name in _ACCELERATOR)
        + ("torch._C._nn._parse_to",),
    ),
    Patch(
        "`broadcast`, `broadcast_coalesced`, `scatter`, `gather` of `torch.nn.parallel.comm` "
        "and `torch.cuda.comm`",
        FIRST_USE,
        "DataParallel's copies (torch's and this package's replicate) get a Python path on "
        "simulated devices where a CPU build lacks CUDA's C++; other tensors reach torch's own",
        tuple(f"torch.{m}.{name}" for m in ("nn.parallel.comm", "cuda.comm") for name in _COMM),
    ),
    Patch(
        "`torch.cuda.nccl`'s `is_available` and collectives",
        FIRST_USE,
        "NCCL cannot take simulated tensors: `is_available` answers False for them (reductions "
        "then copy device to device), the collectives refuse them naming the alternative",
        tuple(f"torch.cuda.nccl.{name}" for name in _NCCL),
    ),
    Patch(
        "`_get_available_device_type`, `_get_all_device_indices` of torch's DataParallel",
        FIRST_USE,
        "torch's DataParallel picks `sim` where this package's does but torch's would pick CUDA "
        "(`LEARN_PARALLEL_SIMULATE` beside a GPU) or MPS (an Apple-silicon Mac)",
        tuple(
            f"torch.nn.parallel.data_parallel.{name}"
            for name in ("_get_available_device_type", "_get_all_device_indices")
        ),
    ),
    Patch(
        "`torch.utils.swap_tensors`",
        FIRST_USE,
        "moving a weight that a live autograd graph holds is refused, saying how to free the "
        "graph (torch's swap would poison it, and a later backward would end the process)",
        ("torch.utils.swap_tensors",),
    ),
    Patch(
        "`warnings._showwarnmsg`",
        FIRST_USE,
        "a warning torch raises for a simulated tensor is shown at the user's line, once per "
        "line, not at the simulator's",
        ("warnings._showwarnmsg",),
    ),
)


def markdown() -> str:
    """`PATCHES` as a Markdown table, for the devices chapter."""
    rows = ["| what changes | when | why |", "| --- | --- | --- |"]
    rows += [f"| {p.what} | {p.when} | {p.why} |" for p in PATCHES]
    return "\n".join(rows)


_lock = threading.RLock()
_installed = False
_installing = False
_kept: list[torch.library.Library] = []  # registrations live as long as their library


def installed() -> bool:
    """Whether the first use has happened (the `FIRST_USE` rows are in place)."""
    return _installed


def install() -> None:
    """Put every `FIRST_USE` row in place, once (cheap afterwards; safe from any thread)."""
    global _installed, _installing
    if _installed:
        return
    with _lock:
        if _installed or _installing:  # done, or this thread is doing it
            return
        _installing = True
        try:
            _install()
        finally:
            _installed, _installing = True, False


def _install() -> None:
    generate_methods_for_privateuse1_backend()
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # replacing the CPU kernel is the point
        warnings.simplefilter("ignore")
        library.impl("_pin_memory", moves.pin_memory, "CPU")
    _kept.append(library)
    grads.patch_backward()
    grads.install()
    generators.install()
    follow_current_device()
    torch_parallel.install()  # torch's own DataParallel runs here too
    torch.utils.swap_tensors = moves.refusing_to_move_saved(torch.utils.swap_tensors)
    warning_frames.install()
