"""On GPUs: the CUDA facts the simulated devices copy (current device, lazy modules, inference
tensors, sparse gradients, broadcast_coalesced), and what a GPU process with ``sim`` registered
still does (pinning) or says (backward). Tests that register ``sim`` run in a fresh interpreter:
after that, backward on CUDA tensors fails in the process."""

from __future__ import annotations

import pytest
import torch
from _one_gpu import run_with_one_gpu
from torch import nn
from torch.nn.parallel import comm

pytestmark = pytest.mark.gpu


@pytest.mark.one_gpu
def test_importing_beside_a_gpu_registers_nothing():
    out = run_with_one_gpu(
        "import torch, learn_parallel\nprint(torch._C._get_privateuse1_backend_name())\n"
    )
    assert out.strip() == "privateuseone"


@pytest.mark.one_gpu
def test_with_sim_registered_beside_a_gpu_pinning_is_cudas_and_backward_says_why():
    out = run_with_one_gpu(
        "import warnings, torch\n"
        "from learn_parallel import sim\n"
        "from learn_parallel.sim.grads import CUDA_AFTER_SIM_MESSAGE\n"
        "sim.enable()\n"
        "warnings.simplefilter('ignore', DeprecationWarning)  # is_pinned(device)\n"
        "cuda = torch.device('cuda')\n"
        "print(torch.ones(3).pin_memory().is_pinned(cuda))\n"
        "loader = torch.utils.data.DataLoader([torch.ones(3)], pin_memory=True)\n"
        "print(next(iter(loader)).is_pinned(cuda))\n"
        "net = torch.nn.Linear(2, 2).cuda()\n"
        "try:\n"
        "    net(torch.randn(1, 2, device='cuda')).sum().backward()\n"
        "except RuntimeError as error:\n"
        "    print(str(error) == CUDA_AFTER_SIM_MESSAGE)\n"
    )
    assert out.split() == ["True", "True", "True"], out


class RecordsCurrentDevice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.seen: list[tuple[int, int]] = []

    def forward(self, x):
        self.seen.append((x.device.index, torch.cuda.current_device()))
        return self.linear(x) + torch.ones(1, device="cuda")


def test_each_replica_of_torchs_data_parallel_runs_with_its_own_device_current():
    module = RecordsCurrentDevice().cuda()
    nn.DataParallel(module, device_ids=[0, 1])(torch.randn(4, 3, device="cuda"))
    assert sorted(module.seen) == [(0, 0), (1, 1)]


def test_a_bare_cuda_follows_the_current_device_for_cpu_tensors_too():
    with torch.cuda.device(1):
        assert torch.ones(2).to("cuda").device.index == 1
        assert torch.tensor([1.0], device="cuda").device.index == 1
        assert nn.Linear(2, 2).to("cuda").weight.device.index == 1
        assert torch.accelerator.current_device_index() == 1


def test_a_lazy_module_is_made_on_its_gpu_at_the_first_forward():
    module = nn.LazyLinear(4).to("cuda:1")
    assert module.weight.device == torch.device("cuda:1")
    module(torch.randn(2, 3, device="cuda:1"))
    assert module.weight.shape == (4, 3) and module.weight.device == torch.device("cuda:1")


def test_an_inference_tensor_comes_back_to_the_cpu_after_the_block():
    with torch.inference_mode():
        y = torch.ones(3, device="cuda:0")
    assert y.cpu().device == torch.device("cpu") and y.to("cuda:1").device.index == 1


def test_a_sparse_embedding_gives_a_sparse_gradient_and_broadcast_coalesced_gives_lists():
    embedding = nn.Embedding(10, 5, sparse=True).cuda()
    embedding(torch.tensor([1, 2], device="cuda")).sum().backward()
    assert embedding.weight.grad.is_sparse
    copies = comm.broadcast_coalesced([torch.ones(2, device="cuda:0")], [0, 1])
    assert [type(c) for c in copies] == [list, list]
