"""Lazy modules on simulated devices: moved uninitialized, made at the first forward.

CUDA (torch's LazyModuleMixin docs): ``nn.LazyLinear(4).to("cuda:0")`` keeps its parameters
uninitialized on cuda:0, and the first forward makes them there, with the input's sizes.
Through torch's DataParallel an uninitialized module is refused by torch's own code on
both kinds of device (the GPU test beside the simulated one, run by ``pytest -m gpu``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

from learn_parallel import sim


@pytest.fixture(autouse=True)
def _on(request):
    if request.node.get_closest_marker("gpu"):  # sim would break CUDA's autograd
        yield
        return
    sim.enable()
    yield
    torch.sim.set_device(0)


def test_a_lazy_linear_moved_to_a_simulated_device_is_made_there_at_its_first_forward():
    module = nn.LazyLinear(4).to("sim:1")
    assert isinstance(module.weight, UninitializedParameter)
    assert module.weight.device == torch.device("sim:1")
    x = torch.randn(5, 3).to("sim:1")
    y = module(x)
    assert type(module) is nn.Linear and not is_lazy(module.weight)
    assert isinstance(module.weight, nn.Parameter) and module.weight.shape == (4, 3)
    assert module.weight.device == module.bias.device == y.device == torch.device("sim:1")
    expected = F.linear(x.cpu(), module.weight.detach().cpu(), module.bias.detach().cpu())
    torch.testing.assert_close(y.detach().cpu(), expected)
    y.sum().backward()
    assert module.weight.grad.device == torch.device("sim:1")
    torch.testing.assert_close(module.weight.grad.cpu(), x.cpu().sum(0).expand(4, 3))


def test_lazy_buffers_and_parameters_of_batchnorm_are_made_on_the_device():
    module = nn.LazyBatchNorm1d().to("sim:2")
    assert isinstance(module.running_mean, UninitializedBuffer)
    assert isinstance(module.weight, UninitializedParameter)
    x = torch.randn(6, 3).to("sim:2")
    module(x)
    for tensor in (module.weight, module.running_mean, module.running_var):
        assert tensor.device == torch.device("sim:2") and tensor.shape == (3,)
    torch.testing.assert_close(module.running_mean.cpu(), 0.1 * x.cpu().mean(0))


def test_uninitialized_tensors_move_between_devices_and_casts_keep_them_uninitialized():
    module = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(2)).to("sim:0")
    module.to("sim:1")
    with torch.sim.device(2):
        module.to("sim")  # a bare "sim": the current device
    module.to(torch.float64)
    copied = copy.deepcopy(module)
    for each in (module, copied):
        assert isinstance(each[2].weight, UninitializedParameter)
        assert each[2].weight.device == torch.device("sim:2")
        assert each[2].weight.dtype == torch.float64
        out = each(torch.randn(5, 3, dtype=torch.float64).to("sim:2"))
        assert out.device == torch.device("sim:2") and each[0].weight.shape == (4, 3)


def test_an_uninitialized_parameter_cannot_leave_a_simulated_device_and_says_why():
    module = nn.LazyLinear(4).to("sim:0")
    with pytest.raises(RuntimeError, match="cannot move from sim:0 to cpu.*forward pass first"):
        module.cpu()
    module(torch.randn(2, 3).to("sim:0"))
    assert module.cpu().weight.device == torch.device("cpu")  # once initialized, it moves


def test_an_uninitialized_buffer_moves_back_and_is_still_refused_where_torch_refuses():
    module = nn.LazyBatchNorm1d(affine=False).to("sim:0").cpu()
    assert isinstance(module.running_mean, UninitializedBuffer)
    assert module.running_mean.device == torch.device("cpu")
    with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
        nn.LazyLinear(4).to("sim:0").weight + 1  # torch's own error, unchanged


def test_broadcast_coalesced_copies_uninitialized_parameters_as_the_empty_tensors_they_are():
    """What CUDA's C++ does: it never sees LazyLinear's refusal, only empty tensors."""
    lazy = nn.LazyLinear(3).to("sim:0")
    copies = torch.nn.parallel.comm.broadcast_coalesced([lazy.weight, lazy.bias], [0, 1])
    assert copies[0][0] is lazy.weight and copies[0][1] is lazy.bias  # device 0: the originals
    assert [(type(t), t.device, t.numel()) for t in copies[1]] == [
        (sim.SimTensor, torch.device("sim:1"), 0)
    ] * 2


# With gradients, torch's Broadcast returns device 0's inputs, whose view the mixin refuses;
# without, the copies reach replicate, which refuses the lazy module.
LAZY_REFUSAL = {
    True: "Attempted to use an uninitialized parameter in <method 'view_as'",
    False: "Modules with uninitialized parameters can't be used with `DataParallel`",
}


def _torchs_data_parallel_on_a_lazy_module(device: str, grad: bool) -> str:
    module = nn.LazyLinear(3).to(f"{device}:0")
    x = torch.ones(4, 2, device=f"{device}:0")
    with torch.set_grad_enabled(grad), pytest.raises((ValueError, RuntimeError)) as caught:
        torch.nn.DataParallel(module, device_ids=[0, 1])(x)
    return str(caught.value)


@pytest.mark.parametrize("grad", [True, False])
def test_torchs_data_parallel_refuses_a_lazy_module_with_torchs_own_errors(grad):
    assert LAZY_REFUSAL[grad] in _torchs_data_parallel_on_a_lazy_module("sim", grad)


@pytest.mark.gpu
@pytest.mark.parametrize("grad", [True, False])
def test_on_gpus_torchs_data_parallel_refuses_a_lazy_module_with_the_same_errors(grad):
    assert LAZY_REFUSAL[grad] in _torchs_data_parallel_on_a_lazy_module("cuda", grad)
