"""Saved-tensor hooks set around a step (save_on_cpu and the like) reach the replicas' workers,
and a torch whose hook reader is missing or unusable gets one warning, not a failed forward."""

import sys
import threading

import pytest
import torch
from _training import SimDevices
from torch import nn

import learn_parallel as lp

SIM = SimDevices(4)  # SIM[0] is device_ids[0]


def test_saved_tensor_hooks_of_the_caller_apply_inside_replicas():
    packed_by = []

    def pack(tensor):
        packed_by.append(threading.current_thread().name)
        return tensor

    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1)).double().to(SIM[0])
    x = torch.randn(8, 3, dtype=torch.double, device=SIM[0])
    net(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = lp.DataParallel(net, [0, 1])(x)
    workers = {name for name in packed_by if name.startswith("learn_parallel worker")}
    assert workers == {"learn_parallel worker sim:0", "learn_parallel worker sim:1"}
    output.sum().backward()
    for got, expected in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, expected)


def _reader_replaced_warns_once(monkeypatch, replacement) -> None:
    """With the hook reader missing or unusable, the forward runs, and one warning (not one per
    call, not none) says the workers run without the hooks."""
    reader = sys.modules["learn_parallel.parallel_apply"]._saved_tensor_hooks_reader
    name = "_top_saved_tensors_default_hooks"
    if replacement is None:
        monkeypatch.delattr(torch._C._autograd, name, raising=False)
    else:
        monkeypatch.setattr(torch._C._autograd, name, replacement)
    reader.cache_clear()
    try:
        net = nn.Linear(3, 1).double().to(SIM[0])
        x = torch.randn(8, 3, dtype=torch.double, device=SIM[0])
        expected = net(x)
        with pytest.warns(UserWarning, match=r"no reader of a thread's saved-tensor hooks") as seen:
            first = lp.DataParallel(net, [0, 1])(x)
            lp.DataParallel(net, [0, 1])(x)
        torch.testing.assert_close(first, expected)
        assert len([w for w in seen if "saved-tensor hooks" in str(w.message)]) == 1
        assert seen[0].filename == __file__  # shown at the caller's line
        assert "2.11 and 2.13 have one" in str(seen[0].message)
    finally:
        reader.cache_clear()  # the real torch's reader again for later tests


def test_a_torch_without_the_hook_reader_says_so_once(monkeypatch):
    _reader_replaced_warns_once(monkeypatch, None)


def test_a_hook_reader_with_other_arguments_warns_instead_of_failing(monkeypatch):
    # A private binding's signature can change between versions: one that takes no argument
    # must not fail the forward with a TypeError.
    _reader_replaced_warns_once(monkeypatch, lambda: None)


def test_save_on_cpu_around_a_step_gives_the_same_gradients():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).double().to(SIM[0])
    x = torch.randn(8, 3, dtype=torch.double)
    lp.DataParallel(net, [0, 1, 2, 3])(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with torch.autograd.graph.save_on_cpu():
        lp.DataParallel(net, [0, 1, 2, 3])(x).sum().backward()
    for got, expected in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, expected)
