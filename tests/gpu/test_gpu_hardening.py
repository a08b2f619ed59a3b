"""Hardening on real GPUs: complex parameters, saved-tensor hooks, errors, nested calls.

Run with ``pytest -m gpu tests/gpu/test_gpu_hardening.py`` on a machine with two GPUs.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import Device
from learn_parallel.replicate import copy_to_devices, replicate

pytestmark = pytest.mark.gpu
TOL = {"rtol": 1e-10, "atol": 1e-12}  # float64 / complex128


class ComplexFilter(nn.Module):
    """A complex weight (as in spectral layers), a real bias, a real output."""

    def __init__(self, features: int = 10):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(
            torch.randn(1, features, dtype=torch.complex128, generator=generator)
        )
        self.bias = nn.Parameter(torch.randn(features, dtype=torch.float64, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.complex128) * self.weight).abs() + self.bias


def test_complex_parameters_reach_every_replica_as_complex():
    gpus = [Device("cuda", 0), Device("cuda", 1)]
    net = ComplexFilter().to("cuda:0")
    copies = copy_to_devices(list(net.parameters()), gpus)
    for device, per_device in zip(gpus, copies):
        assert [c.dtype for c in per_device] == [torch.complex128, torch.float64]
        assert all(c.device == device.torch_device for c in per_device)
        torch.testing.assert_close(per_device[0].cpu(), net.weight.detach().cpu(), **TOL)
    replicas = replicate(net, gpus)
    assert replicas[1].weight.dtype == torch.complex128
    assert replicas[1].weight.shape == (1, 10)


def test_complex_parameters_train_like_one_device_on_two_gpus():
    x = torch.randn(8, 10, dtype=torch.float64)
    one = ComplexFilter().to("cuda:0")
    expected = one(x.to("cuda:0"))
    expected.square().sum().backward()

    net = ComplexFilter().to("cuda:0")
    output = lp.DataParallel(net, device_ids=[0, 1])(x.to("cuda:0"))
    torch.testing.assert_close(output, expected, **TOL)
    output.square().sum().backward()
    for got, want in zip(net.parameters(), one.parameters()):
        assert got.grad.dtype == want.grad.dtype
        torch.testing.assert_close(got.grad, want.grad, **TOL)


def test_save_on_cpu_around_a_gpu_step_gives_the_same_gradients():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).double().to("cuda:0")
    x = torch.randn(64, 16, dtype=torch.float64, device="cuda:0")
    dp = lp.DataParallel(net, device_ids=[0, 1])
    dp(x).sum().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        dp(x).sum().backward()
    for got, expected in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, expected, **TOL)


class CodedError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


class RaisesOnSecondGpu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.index == 1:
            raise CodedError(3, "bad rows")
        return x


def test_a_replicas_exception_keeps_its_type_and_says_which_gpu():
    dp = lp.DataParallel(RaisesOnSecondGpu(), device_ids=[0, 1])
    with pytest.raises(CodedError, match=r"Caught CodedError in replica 1 on device cuda:1") as e:
        dp(torch.ones(4, 2, device="cuda:0"))
    assert e.value.code == 3


class HandsOff(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The helper's DataParallel starts on this replica's GPU and uses both, while
        # both workers are busy running the outer replicas.
        ids = [x.device.index, 1 - x.device.index]
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(lp.data_parallel, self.inner, x, ids).result(timeout=60)


def test_data_parallel_from_a_replicas_helper_thread_completes_on_gpus():
    net = HandsOff().to("cuda:0")
    x = torch.randn(8, 4, dtype=torch.float64, device="cuda:0")
    output = lp.DataParallel(net, device_ids=[0, 1])(x)
    torch.testing.assert_close(output, net.inner.to("cuda:0")(x), **TOL)
