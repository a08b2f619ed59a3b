"""One training step, the way every timed comparison in the book runs it.

`train_step` (the performance chapter shows it): forward, loss, backward, SGD step;
`make_step` builds one for a workload under any wrapper; `record_timeline` records a few
more per device (no profiler: `kernels.ProfiledPass` adds the GPU work after every timed
round); `failure_becomes_row` turns a failed run into a row of a result table;
`one_thread_per_device` is the CPU thread policy set before anything is timed.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from learn_parallel.devices import Device, device_type
from learn_parallel.lab.timeline import Timeline
from learn_parallel.lab.timing import Recorder, phase
from learn_parallel.lab.trace import ProfiledProcessError
from learn_parallel.lab.workloads import Workload, build_model, loss_function, make_batch


def one_thread_per_device() -> str:
    """Give each simulated device (and the one-device baseline) one CPU core; say so in a line.

    A simulated device computes in its worker thread; with torch's default intra-op pool
    every operator also spreads over all cores, so N devices' threads fight over them (on a
    busy machine one device's step got slower than N devices'). GPU runs are left alone.
    """
    if device_type() == "cuda":
        return ""
    torch.set_num_threads(1)
    cores = os.cpu_count() or 1
    return (
        f"CPU timings: one thread per simulated device and for the one-device baseline "
        f"(torch.set_num_threads(1)); this machine has {cores} core{'s' if cores != 1 else ''}."
    )


def train_step(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    workload: Workload,
    optimizer: Any,
) -> None:
    """One full training step; the phase marks cost a flag read unless a recorder is on."""
    output = model(x)
    with phase("loss"):
        loss = loss_function(workload, output, y)
    with phase("backward"):
        loss.backward()
    with phase("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def one_device(model: nn.Module, device_ids: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The baseline "wrapper": the model itself, its forward marked on its device."""
    device = Device(device_type(), device_ids[0])

    def forward(x: torch.Tensor) -> torch.Tensor:
        with phase("forward", device):
            return model(x)

    return forward


def make_step(
    workload: Workload,
    devices: Sequence[Device],
    wrap: Callable[[nn.Module, list[int]], Any],
    lr: float = 0.01,
    seed: int = 0,
) -> tuple[Callable[[], None], Any, nn.Module]:
    """One training step of ``workload``: its model on the first device, wrapped by
    ``wrap(model, device_ids)``, and a batch there; returns (step, wrapper, model)."""
    source = devices[0].torch_device
    model = build_model(workload, seed).to(source)
    forward = wrap(model, [d.index for d in devices])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = make_batch(workload, workload.batch, source, seed)

    def step() -> None:
        train_step(forward, x, y, workload, optimizer)

    return step, forward, model


def record_timeline(step: Callable[[], Any], devices: Sequence[Device], steps: int) -> Timeline:
    """``steps`` more calls of ``step`` recorded per device, every device idle between them."""
    with Recorder(devices=devices) as recorder:
        for _ in recorder.steps(steps):
            step()
    return recorder.timeline()


@contextmanager
def failure_becomes_row(row: dict[str, Any], limit: int = 600) -> Iterator[dict[str, Any]]:
    """Run the body for ``row``; an exception (say, out of memory) marks the row failed
    with its message instead of ending the whole run. Memory is given back either way."""
    try:
        yield row
    except ProfiledProcessError:
        raise  # the run's method is wrong, not this row
    except Exception as error:  # noqa: BLE001 - one failure is a row, not a lost run
        row.update(status="failed", note=f"{type(error).__name__}: {error}"[:limit])
    finally:
        gc.collect()  # hooks and replicas form cycles: free them before the next run
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
