"""When ``sim`` is registered, and what a process with it registered tells a CUDA user.

Without a GPU, importing learn_parallel registers ``sim``, so a reader's first line
``model.to("sim:1")`` works; beside a GPU nothing is registered until simulated devices
are used (``test_torch_comm_on_sim`` checks that), because CUDA's backward then fails in
that process, with a message of ours instead of torch's internal assertion.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learn_parallel import sim
from learn_parallel.sim.grads import CUDA_AFTER_SIM_MESSAGE

TESTS = Path(__file__).resolve().parents[1]


def run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEARN_PARALLEL_SIMULATE"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_moving_a_model_to_a_simulated_device_works_as_the_first_line_after_import():
    done = run(
        "import torch\n"
        "import learn_parallel as lp\n"
        "print(torch.nn.Linear(20, 5).to('sim:1').weight.device)\n"
    )
    assert done.stdout.strip() == "sim:1", done.stderr


def test_import_leaves_a_device_type_another_backend_took_alone():
    done = run(
        "import torch\n"
        "torch.utils.rename_privateuse1_backend('other')\n"
        "import learn_parallel as lp\n"
        "try:\n"
        "    lp.Device('sim', 0).torch_device\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    assert "already taken by 'other'" in done.stdout, done.stderr


class _EngineAssertion(torch.autograd.Function):
    """A backward that fails as torch's engine does on CUDA tensors once ``sim`` is registered."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            'opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED at "/pytorch/torch/'
            'csrc/autograd/engine.cpp":1084, please report a bug to PyTorch.'
        )


@pytest.mark.parametrize("call", ["backward", "grad"])
def test_cuda_backward_after_simulated_devices_says_why_in_one_line(call):
    """torch 2.11 on one H100 (learn_parallel/lab/recorded/h100-x1/sim-cuda-backward.log):
    the engine's internal assertion; faked here, on the CPU."""
    sim.enable()
    x = torch.ones(2, requires_grad=True)
    y = _EngineAssertion.apply(x).sum()
    with pytest.raises(RuntimeError) as caught:
        y.backward() if call == "backward" else torch.autograd.grad(y, x)
    message = str(caught.value)
    assert message == CUDA_AFTER_SIM_MESSAGE and "\n" not in message
    assert "fresh process" in message and "LEARN_PARALLEL_SIMULATE unset" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_other_backward_errors_pass_through_unchanged():
    sim.enable()
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        x.detach().sum().backward()


def _conftest():
    spec = importlib.util.spec_from_file_location("tests_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("cuda", [True, False])
def test_conftest_refuses_a_collection_that_registered_sim_only_beside_a_gpu(monkeypatch, cuda):
    """A GPU run must not collect a module that registers ``sim``; without a GPU the
    import itself registers it, and there is nothing to protect."""
    conftest = _conftest()
    sim.enable()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    if cuda:
        with pytest.raises(pytest.UsageError, match="registered the simulated device type"):
            conftest.pytest_collection_finish(None)
    else:
        conftest.pytest_collection_finish(None)  # no error
