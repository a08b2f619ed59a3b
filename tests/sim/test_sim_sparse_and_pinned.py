"""Sparse tensors and pinned host memory once simulated devices are registered.

CUDA: ``nn.Embedding(sparse=True)`` gives a sparse gradient; simulated devices hold dense
tensors only, so they refuse it in the forward, with a Python error, never by ending the
process. Pinning: torch pins for its current accelerator, which is ``sim`` once registered;
where a GPU exists the pinning must still be CUDA's own (so copies to it stay asynchronous).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from learn_parallel import sim


@pytest.fixture(autouse=True)
def _on():
    sim.enable()


def test_a_sparse_gradient_is_refused_in_the_forward_and_the_interpreter_lives_on():
    code = (
        "import torch, learn_parallel\n"
        "embedding = torch.nn.Embedding(10, 5, sparse=True).to('sim:0')\n"
        "try:\n"
        "    embedding(torch.tensor([1, 2]).to('sim:0')).sum().backward()\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
        "print('still running')\n"
    )
    env = {**os.environ, "LEARN_PARALLEL_SIMULATE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr  # before: "terminate called ...", exit 134
    assert "nn.Embedding with sparse=True on a simulated device" in done.stdout
    assert done.stdout.strip().endswith("still running")


@pytest.mark.parametrize("kind", [nn.Embedding, nn.EmbeddingBag])
def test_sparse_embeddings_are_refused_only_where_a_sparse_gradient_would_follow(kind):
    module = kind(10, 5, sparse=True).to("sim:0")
    indices = torch.tensor([[1, 2]]).to("sim:0")
    with pytest.raises(RuntimeError, match=f"{kind.__name__} with sparse=True.*Pass sparse=False"):
        module(indices)
    with torch.no_grad():
        expected = module(indices)  # no gradient, nothing sparse: allowed
    module.weight.requires_grad_(False)
    torch.testing.assert_close(module(indices).cpu(), expected.cpu())


def test_gather_with_a_sparse_gradient_is_refused():
    x = torch.randn(3, 3).to("sim:0").requires_grad_()
    index = torch.zeros(1, 3, dtype=torch.long).to("sim:0")
    with pytest.raises(RuntimeError, match="torch.gather with sparse_grad=True"):
        torch.gather(x, 0, index, sparse_grad=True)


SPARSE = {
    "to_sparse() there": lambda: torch.eye(2).to("sim:0").to_sparse(),
    "a sparse tensor moved there": lambda: torch.eye(2).to_sparse().to("sim:1"),
    "to_sparse_csr() there": lambda: torch.eye(2).to("sim:0").to_sparse_csr(),
}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("make", SPARSE.values(), ids=SPARSE)
def test_sparse_tensors_cannot_live_on_a_simulated_device(make):
    with pytest.raises(NotImplementedError, match="dense tensors only.*to_dense"):
        make()


def test_without_a_gpu_pinning_is_a_plain_copy():
    host = torch.arange(4.0)
    pinned = host.pin_memory()
    assert pinned is not host and torch.equal(pinned, host) and not pinned.is_pinned()
    batch = next(iter(torch.utils.data.DataLoader([host], pin_memory=True)))
    assert torch.equal(batch, host.unsqueeze(0))


def test_beside_a_gpu_pinning_is_cudas_own(monkeypatch):
    """With CUDA faked, pin_memory() must reach torch's own kernel, for CUDA: this CPU build
    has no CUDA and says so (on a GPU the tensor comes back pinned)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.arange(4.0).pin_memory()
    with pytest.raises(RuntimeError, match="CUDA"):
        next(iter(torch.utils.data.DataLoader([torch.arange(4.0)], pin_memory=True)))
