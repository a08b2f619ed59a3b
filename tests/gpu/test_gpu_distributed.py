"""learn_parallel.DistributedDataParallel on two GPUs with NCCL (``pytest -m gpu``).

The same checks as tests/ladder/test_distributed.py, in float64 on ``cuda:0`` and
``cuda:1`` (NCCL sums float64 too), plus agreement with
``torch.nn.parallel.DistributedDataParallel``: same models, data and processes,
three SGD steps, float32. With two ranks both implementations add the same two
numbers and divide by two, so they may well agree bit for bit; the tolerance
(rtol 1e-4, atol 1e-5) leaves room for cuDNN choosing different (or
non-deterministic) kernels for the two model copies.

Every run has a time limit (`run_ranks`: 80 s in all, 40 s per collective),
so a broken rank fails the test instead of hanging it.
"""

from __future__ import annotations

import pytest
import torch
from _torch_agreement import suite_with_torch

from learn_parallel.lab.ddp_checks import reference_training
from learn_parallel.lab.processes import run_ranks

pytestmark = pytest.mark.gpu

TOL64 = dict(rtol=0, atol=1e-12)
TOL32 = dict(rtol=1e-4, atol=1e-5)
TASKS = [
    ("train", {"rows": [4, 4]}),
    ("train", {"rows": [3, 5]}),
    ("ring", {"numel": 11}),
    ("ring", {"numel": 1}),
    ("no_sync", {}),
    ("errors", {}),
]


@pytest.fixture(scope="module")
def results():
    # run_ranks puts the NCCL settings into every rank's environment itself.
    return run_ranks(
        suite_with_torch, 2, args=(TASKS,), backend="nccl", timeout_s=80, group_timeout_s=40
    )


def _close(a: dict, b: dict, tol: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("task, rows", [(0, [4, 4]), (1, [3, 5])], ids=["even", "uneven"])
def test_three_steps_match_one_process(results, task, rows):
    reference = reference_training(rows, steps=3)
    for rank, result in enumerate(results):
        mine = result[f"train:{task}"]
        for step in range(3):
            torch.testing.assert_close(
                mine["outputs"][step], reference["outputs"][step][rank], **TOL64
            )
            _close(mine["grads"][step], reference["grads"][step], TOL64)
            _close(mine["params"][step], reference["params"][step], TOL64)


def test_ring_all_reduce_equals_nccl_all_reduce(results):
    for task in (2, 3):
        inputs = torch.stack([r[f"ring:{task}"]["input"] for r in results])
        for result in results:
            ring = result[f"ring:{task}"]
            torch.testing.assert_close(ring["ring"], ring["all_reduce"], **TOL64)
            torch.testing.assert_close(ring["ring"], inputs.sum(0), **TOL64)


def test_no_sync_then_one_synchronised_backward_equals_one_big_batch(results):
    big = reference_training([4] * 6, steps=1, per_rank_mean=False)
    for result in results:
        _close(result["no_sync:4"]["grads"], big["grads"][0], TOL64)
        _close(result["no_sync:4"]["params"], big["params"][0], TOL64)
    first = [r["no_sync:4"]["first_local_grads"] for r in results]
    assert any(not torch.equal(first[0][n], first[1][n]) for n in first[0]), (
        "inside no_sync the two ranks' gradients must still be their own"
    )


def test_refusals_on_gpus(results):
    for rank, result in enumerate(results):
        messages = result["errors:5"]
        assert "got no gradient" in messages["unused"]
        assert f"must name the one device the module is on ([{rank}])" in messages["device_ids"]
        assert "NCCL, which moves only CUDA tensors" in messages["cpu_module"]
        assert f"this process's current GPU is cuda:{rank}" in messages["other_gpu"]
        assert "torch.cuda.set_device(rank)" in messages["other_gpu"]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_agrees_with_torch_distributed_data_parallel(results, model):
    for result in results:
        ours, theirs = result["torch"][f"{model}:ours"], result["torch"][f"{model}:torch"]
        for step in range(3):
            torch.testing.assert_close(ours["outputs"][step], theirs["outputs"][step], **TOL32)
            _close(ours["grads"][step], theirs["grads"][step], TOL32)
        _close(ours["params"], theirs["params"], TOL32)
        _close(ours["buffers"], theirs["buffers"], TOL32)
    # And the ranks hold the same parameters after training (the point of DDP).
    first, second = (r["torch"][f"{model}:ours"]["params"] for r in results)
    _close(first, second, TOL64)
