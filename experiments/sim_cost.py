"""What one simulated device adds to a training step: ``python -m experiments.sim_cost``.

Feeds the devices chapter's note on the cost of simulated devices (it prints a table;
nothing is recorded). One SGD step of a 3-layer MLP (512 wide, batch 256 by default)
runs four ways, side by side in one run (`make_step`): ``cpu``, plain CPU tensors, the
reference; ``wrapper on cpu``, the same inside a bare wrapper subclass (`Wrapped`):
what any tensor whose operations PyTorch hands to Python costs; ``sim:0, bare
dispatch`` (`bare_dispatch`): adds what a device type written in Python costs (device
guards, memory counts); ``sim:0``: a simulated device as it is, every check on.
How the rounds are timed: `measure`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device
from learn_parallel.sim import SimTensor

Step = Callable[[], None]


class Wrapped(torch.Tensor):
    """A bare wrapper on the CPU device: unwrap, run, wrap; nothing checked."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> Wrapped:
        layout = {"strides": data.stride(), "storage_offset": data.storage_offset()}
        grad = {"dtype": data.dtype, "requires_grad": data.requires_grad}
        wrapper = torch.Tensor._make_wrapper_subclass(cls, data.size(), **layout, **grad)
        wrapper._data = data
        return wrapper

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        given: dict[int, torch.Tensor] = {}
        plain = [_unwrap_bare(a, Wrapped, given) for a in args]
        out = func(*plain, **(kwargs or {}))
        return _wrap_bare(out, given, Wrapped)


def _unwrap_bare(x: Any, kind: type, given: dict) -> Any:
    if isinstance(x, kind):
        given[id(x._data)] = x
        return x._data
    return x


def _wrap_bare(x: Any, given: dict, make: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        same = given.get(id(x))
        return x if type(x) is not torch.Tensor else (same if same is not None else make(x))
    if type(x) in (list, tuple):
        return type(x)(_wrap_bare(v, given, make) for v in x)
    return x


@contextmanager
def bare_dispatch() -> Iterator[None]:
    """Simulated tensors dispatched without any check, while inside."""
    sim = SimTensor
    original = sim.__dict__["__torch_dispatch__"]

    def dispatch(cls, func, types, args=(), kwargs=None):
        given: dict[int, torch.Tensor] = {}
        plain = [_unwrap_bare(a, sim, given) for a in args]
        kwargs = dict(kwargs or {})
        if kwargs.get("device") is not None:
            kwargs["device"] = torch.device("cpu")  # e.g. ones_like: made on the CPU, wrapped
        return _wrap_bare(func(*plain, **kwargs), given, lambda t: sim(t, 0))

    sim.__torch_dispatch__ = classmethod(dispatch)
    try:
        yield
    finally:
        sim.__torch_dispatch__ = original


def make_step(where: str, width: int, batch: int) -> Step:
    """One SGD step of Linear-ReLU-Linear-ReLU-Linear on ``where`` ("cpu", "wrapped", "sim:0")."""
    torch.manual_seed(0)
    layers = [nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, width))
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    if where == "wrapped":
        for layer in model[::2]:
            layer.weight = nn.Parameter(Wrapped(layer.weight.detach()))
            layer.bias = nn.Parameter(Wrapped(layer.bias.detach()))
        x, y = Wrapped(x), Wrapped(y)
    elif where != "cpu":
        model, x, y = model.to(where), x.to(where), y.to(where)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    return step


def measure(
    width: int = 512, batch: int = 256, rounds: int = 15, steps: int = 5, clock: str = "host"
) -> dict:
    """Per variant: ms per step in each round, and its ratio to the CPU in that round.

    Each round runs every variant for a few steps, in a rotated order, so load on the
    machine hits them alike; a ratio is given as the median and [min, max] over rounds.
    The host clock (``time.perf_counter``) by default: on simulated devices the CPU does
    all the work. ``clock="cpu"`` times the process's CPU time instead: on a machine
    that other work keeps busy it counts only this process's work.
    """
    now = time.perf_counter if clock == "host" else time.process_time
    sim = Device("sim", 0).torch_device  # registers the simulated devices
    made = {
        "cpu": (make_step("cpu", width, batch), None),
        "wrapper on cpu": (make_step("wrapped", width, batch), None),
        "sim:0, bare dispatch": (make_step(str(sim), width, batch), bare_dispatch),
        "sim:0": (make_step(str(sim), width, batch), None),
    }
    names = list(made)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            step, context = made[name]
            with context() if context else _nothing():
                start = now()
                for _ in range(steps):
                    step()
                elapsed = (now() - start) / steps * 1e3
            if r:  # round 0 warms up
                times[name].append(elapsed)
    ratios = {n: [t / c for t, c in zip(times[n], times["cpu"])] for n in names}
    return {"times_ms": times, "ratios": ratios}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def table(result: dict) -> str:
    lines = [f"{'variant':22} {'ms/step':>8}  {'x CPU (median [min, max] over rounds)':>38}"]
    for name, ratios in result["ratios"].items():
        ms = statistics.median(result["times_ms"][name])
        spread = f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
        lines.append(f"{name:22} {ms:8.2f}  {spread:>38}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: as set)")
    parser.add_argument("--clock", choices=["host", "cpu"], default="host", help="cpu: CPU time")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.width, args.batch, args.rounds, args.steps, args.clock)
    print(
        f"MLP step, {args.width} wide, batch {args.batch}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; {args.clock} clock, {args.rounds} interleaved rounds of "
        f"{args.steps} steps"
    )
    print(table(result))


if __name__ == "__main__":
    main()
