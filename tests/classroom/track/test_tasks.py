"""Tests of the "build it yourself" track, one pytest marker per task.

They pass on the reference package and, in a track copy made by
``python -m learn_parallel.classroom track OUT``, once the student has written the
task: ``python -m pytest -m task_scatter``. Nothing here may hang on an unfinished
task: the worker's tests run parallel_apply in a thread with a time limit.
"""

from __future__ import annotations

import threading
import weakref

import pytest
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import device_count, device_type, resolve_devices
from learn_parallel.parallel_apply import _Job
from learn_parallel.replicate import Broadcast
from learn_parallel.scatter_gather import Gather, Scatter


def _devices(n: int | None = None):
    devices = resolve_devices(None)
    return devices if n is None else devices[:n]


# ------------------------------------------------------------------ task_scatter


@pytest.mark.task_scatter
@pytest.mark.parametrize("rows", [1, 3, 10])
def test_scatter_splits_like_chunk_and_places_pieces(rows):
    devices = _devices()
    x = torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2)
    pieces = Scatter.apply([d.torch_device for d in devices], None, 0, x)
    expected = x.chunk(len(devices))
    assert len(pieces) == len(expected)
    for piece, want, device in zip(pieces, expected, devices):
        assert torch.equal(piece.cpu(), want)
        assert piece.device == device.torch_device


@pytest.mark.task_scatter
def test_scatter_by_sizes_and_along_dim_1():
    devices = _devices(2)
    x = torch.arange(12.0).reshape(2, 6)
    pieces = Scatter.apply([d.torch_device for d in devices], [4, 2], 1, x)
    assert [tuple(p.shape) for p in pieces] == [(2, 4), (2, 2)]
    assert torch.equal(torch.cat([p.cpu() for p in pieces], 1), x)


@pytest.mark.task_scatter
def test_scatter_gradient_flows_back_to_the_batch():
    devices = _devices()
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    pieces = lp.scatter(x, [d.index for d in devices])
    sum((p * (i + 1)).sum().to(x.device) for i, p in enumerate(pieces)).backward()
    weights = torch.cat([torch.full((len(p),), float(i + 1)) for i, p in enumerate(pieces)])
    assert torch.equal(x.grad, weights[:, None].expand(7, 3).double())


# ------------------------------------------------------------------ task_gather


@pytest.mark.task_gather
def test_gather_joins_on_the_target():
    devices = _devices()
    parts = [torch.full((i + 1, 2), float(i), device=d.torch_device) for i, d in enumerate(devices)]
    joined = Gather.apply(torch.device("cpu"), 0, *parts)
    assert joined.device.type == "cpu"
    assert torch.equal(joined, torch.cat([p.cpu() for p in parts]))


@pytest.mark.task_gather
def test_gather_gradient_goes_back_to_each_piece():
    devices = _devices()
    parts = [
        torch.randn(2, 3, dtype=torch.float64, device=d.torch_device, requires_grad=True)
        for d in devices
    ]
    joined = Gather.apply(devices[0].torch_device, 1, *parts)
    assert joined.shape == (2, 3 * len(devices))
    (
        joined * torch.arange(joined.shape[1], dtype=torch.float64, device=joined.device)
    ).sum().backward()
    for i, part in enumerate(parts):
        expected = torch.arange(3 * i, 3 * i + 3, dtype=torch.float64).expand(2, 3)
        assert torch.equal(part.grad.cpu(), expected)


@pytest.mark.task_gather
def test_gather_of_nested_outputs():
    devices = _devices()
    outs = [{"a": torch.ones(2, device=d.torch_device), "b": None} for d in devices]
    joined = lp.gather(outs, "cpu")
    assert joined["b"] is None and torch.equal(joined["a"], torch.ones(2 * len(devices)))


# ------------------------------------------------------------------ task_broadcast


@pytest.mark.task_broadcast
def test_broadcast_gives_every_device_its_own_copy():
    devices = _devices()
    source = devices[0].torch_device  # parameters live on the first device
    w = torch.randn(3, 2, dtype=torch.float64, device=source, requires_grad=True)
    b = torch.randn(2, dtype=torch.float64, device=source, requires_grad=True)
    copies = Broadcast.apply(devices, w, b)
    assert len(copies) == 2 * len(devices)
    for d, device in enumerate(devices):
        cw, cb = copies[2 * d], copies[2 * d + 1]
        assert torch.equal(cw.cpu(), w.detach().cpu()) and torch.equal(cb.cpu(), b.detach().cpu())
        assert cw.device == device.torch_device
        if d > 0:
            assert cw.data_ptr() != w.data_ptr(), "device d > 0 needs a copy of its own"


@pytest.mark.task_broadcast
def test_broadcast_sums_gradients_back():
    devices = _devices()
    w = torch.randn(4, dtype=torch.float64, device=devices[0].torch_device, requires_grad=True)
    copies = Broadcast.apply(devices, w)
    sum((c * (i + 1)).sum().to(w.device) for i, c in enumerate(copies)).backward()
    total = sum(range(1, len(devices) + 1))
    assert w.grad.device == w.device
    assert torch.equal(w.grad.cpu(), torch.full((4,), float(total), dtype=torch.float64))


@pytest.mark.task_broadcast
def test_replicas_compute_what_the_module_computes():
    devices = _devices()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    model.to(devices[0].torch_device)
    x = torch.randn(5, 3, dtype=torch.float64, device=devices[0].torch_device)
    for replica, device in zip(lp.replicate(model, devices), devices):
        assert torch.allclose(replica(x.to(device.torch_device)).cpu(), model(x).cpu())


# ------------------------------------------------------------------ task_worker


@pytest.mark.task_worker
def test_job_keeps_the_result_and_signals_done():
    job = _Job(lambda: 42)
    job.run()
    assert job.result == 42 and job.failure is None
    assert job.done.is_set() and job.call is None


@pytest.mark.task_worker
def test_job_keeps_the_failure_instead_of_raising():
    class Activation:
        pass

    kept = []

    def broken():
        activation = Activation()  # a local of the failed call, like a replica's activations
        kept.append(weakref.ref(activation))
        raise KeyError("zebra")

    job = _Job(broken)
    job.run()  # must not raise: the worker thread would die
    assert job.done.is_set() and job.call is None and job.result is None
    # The exception object itself, to raise again in the caller, with its traceback...
    assert isinstance(job.failure, KeyError) and "zebra" in str(job.failure)
    assert job.failure.__traceback__ is not None
    # ... whose frames no longer hold the failed call's locals.
    assert kept[0]() is None, "the kept traceback's frames keep the call's locals alive"


def _with_time_limit(function, seconds=10.0):
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "parallel_apply hung: a job never set done"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.task_worker
def test_parallel_apply_runs_every_replica_and_reraises():
    ids = list(range(min(3, device_count())))
    model = nn.Linear(2, 2).double()
    xs = [(torch.randn(1, 2, dtype=torch.float64),) for _ in ids]
    outs = _with_time_limit(lambda: lp.parallel_apply([model] * len(ids), xs, devices=ids))
    assert all(torch.equal(o, model(*x)) for o, x in zip(outs, xs))

    class Picky(nn.Module):
        def forward(self, key):
            return {"a": 1}[key]

    keys = [("a",)] * len(ids)
    keys[-1] = ("missing",)
    with pytest.raises(KeyError, match=f"replica {len(ids) - 1}"):
        _with_time_limit(lambda: lp.parallel_apply([Picky()] * len(ids), keys, devices=ids))


def test_the_machine_has_devices():
    """Not a task: the tests above need at least one device (simulated ones will do)."""
    assert device_count() >= 1 and device_type() in ("cuda", "sim")
