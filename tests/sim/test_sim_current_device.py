"""The current simulated device: what a bare ``"sim"`` means, and each replica's own.

CUDA (torch 2.13 docs; torch's parallel_apply sets it per worker): a bare ``"cuda"``
means the calling thread's current device, for factories, ``x.to``, ``module.to``; and
``torch.accelerator`` reads and sets that same device.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import learn_parallel as lp
from learn_parallel import sim


@pytest.fixture(autouse=True)
def _on():
    sim.enable()
    yield
    torch.sim.set_device(0)


def test_a_bare_sim_follows_the_current_device():
    x = torch.ones(2).to("sim:0")
    with torch.sim.device(1):
        assert torch.ones(1, device="sim").device.index == 1  # a factory
        assert x.to("sim").device.index == 1
        assert x.to(device=torch.device("sim")).device.index == 1
        assert x.sim().device.index == 1
        assert nn.Linear(2, 2).to("sim").weight.device.index == 1  # a CPU module
        assert nn.Linear(2, 2).to("sim:3").to("sim").bias.device.index == 1
    assert x.to("sim").device.index == 0  # back to 0 after the block


def test_what_cpp_resolves_itself_still_means_sim0():
    """The limit the devices chapter's table states: torch's Python-backend device guard
    answers 0 when C++ turns a bare "sim" into an index for a CPU tensor."""
    with torch.sim.device(1):
        assert torch.ones(2).to("sim").device.index == 0
        assert torch.tensor([1.0], device="sim").device.index == 0


def test_torch_accelerator_reads_and_sets_the_simulated_current_device():
    torch.accelerator.set_device_index(2)
    assert torch.accelerator.current_device_index() == 2 == torch.sim.current_device()
    with torch.accelerator.device_index(3):
        assert torch.sim.current_device() == 3
        assert torch.ones(1, device="sim").device.index == 3
    assert torch.accelerator.current_device_index() == 2
    with pytest.raises(RuntimeError, match="sim:7 does not exist"):
        torch.accelerator.set_device_index(7)


class UsesCurrentDevice(nn.Module):
    """A forward that makes a tensor on the current device, and records which one that was."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.seen: list[tuple[int, int]] = []

    def forward(self, x):
        self.seen.append((x.device.index, torch.accelerator.current_device_index()))
        return self.linear(x) + torch.ones(1, device="sim")


@pytest.mark.parametrize("wrapper", [lp.DataParallel, nn.DataParallel])
def test_each_replica_runs_with_its_own_device_current(wrapper):
    torch.manual_seed(0)
    module = UsesCurrentDevice().to("sim:0")
    x = torch.randn(8, 3).to("sim:0")
    expected = module(x)
    expected.sum().backward()
    expected_grad = module.linear.weight.grad.clone()
    module.zero_grad()
    module.seen.clear()

    output = wrapper(module, device_ids=[0, 1, 2, 3])(x)
    output.sum().backward()
    assert_close(output.cpu(), expected.detach().cpu())
    assert_close(module.linear.weight.grad.cpu(), expected_grad.cpu())
    assert sorted(module.seen) == [(i, i) for i in range(4)]  # ours, not the caller's 0
    assert torch.sim.current_device() == 0  # the caller's current device is left alone
