"""What a one-GPU machine (Colab's) runs: `pytest -m gpu` there runs these and skips the
tests that need two GPUs. Each test hides every GPU but the first (CUDA_VISIBLE_DEVICES=0)
where it matters, so it checks the one-GPU behaviour on any GPU machine."""

from __future__ import annotations

import pytest
import torch
from _one_gpu import run_with_one_gpu
from torch import nn

import learn_parallel as lp

pytestmark = [pytest.mark.gpu, pytest.mark.one_gpu]


def test_chapter_plan_simulates_the_devices_and_keeps_the_gpu_for_one_copy():
    out = run_with_one_gpu(
        "import torch\n"
        "from learn_parallel.lab.chapter import PLAN, GPU\n"
        "print(PLAN.kind, len(PLAN.devices), GPU)\n"
        "print(PLAN.summary())\n"
        "print(torch.cuda.get_device_name(0))\n"
    )
    first, *rest = out.splitlines()
    assert first == "sim 4 cuda:0"
    assert "Simulated devices, as this machine has 1 GPU" in out, out
    name = rest[-1]  # the one GPU the child process sees
    said = f"GPU = cuda:0 ({name}): only the devices chapter uses it, to time a copy to it."
    assert said in out, out


def test_an_exercise_check_that_needs_two_devices_runs_on_simulated_ones():
    out = run_with_one_gpu(
        "from learn_parallel.classroom import check\n"
        "from learn_parallel.classroom.tools import machine\n"
        "print([str(d) for d in machine().devices])\n"
        "import torch\n"
        "def refresh(originals, replica_params, flat):\n"
        "    with torch.no_grad():\n"
        "        flat.copy_(torch.cat([o.reshape(-1) for o in originals]))\n"
        "check('refresh-in-place', refresh)\n"
    )
    assert out.splitlines()[0] == "['sim:0', 'sim:1', 'sim:2', 'sim:3']", out
    assert "check passed: refresh-in-place" in out, out


def test_ddp_ranks_fall_back_to_gloo_with_fewer_gpus_than_ranks():
    out = run_with_one_gpu(
        "from learn_parallel.lab.ddp_timeline import choose_backend\n"
        "print(choose_backend(2)[0], choose_backend(1)[0])\n"
    )
    assert out.split() == ["gloo", "nccl"], out


TRAIN_ON_ONE_GPU = """
import copy, torch
from torch import nn
import learn_parallel as lp
torch.manual_seed(0)
base = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3)).double()
x, y = torch.randn(10, 6, dtype=torch.double), torch.randn(10, 3, dtype=torch.double)
runs = []
for wrap in (lambda m: m, lp.DataParallel, nn.DataParallel):
    model = wrap(copy.deepcopy(base).cuda())
    out = model(x.cuda())
    nn.functional.mse_loss(out, y.cuda()).backward()
    inner = getattr(model, "module", model)
    runs.append([out, *[p.grad for p in inner.parameters()], inner[1].running_mean])
for other in runs[1:]:
    for a, b in zip(other, runs[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
print("same outputs, gradients and running mean")
"""


def test_data_parallel_on_the_one_gpu_trains_like_the_module_and_like_torch():
    # A fresh interpreter: once simulated devices are registered in a process, torch takes
    # them for its accelerator and backward on CUDA tensors there stops in an internal
    # assertion (seen with torch 2.11), so this must not share pytest's process.
    out = run_with_one_gpu(TRAIN_ON_ONE_GPU)
    assert out == "same outputs, gradients and running mean\n", out


def test_a_meta_layer_on_one_gpu_is_named_at_construction():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    model[2].to("meta")
    with pytest.raises(ValueError, match=r"parameter '2.weight' is on the meta device.*to_empty"):
        lp.DataParallel(model, device_ids=[0])
    model.to_empty(device="cuda:0")  # the chapter's fix: memory first, then initialise
    model[2].reset_parameters()
    assert lp.DataParallel(model, device_ids=[0])(torch.randn(3, 4).cuda()).shape == (3, 2)
