"""``learn_parallel.ladder.train`` under torchrun on every visible GPU, NCCL (``pytest -m gpu``).

One process per GPU (``torchrun --standalone --nproc-per-node N``, N the GPUs this process
sees): our DDP and torch's, each with the GPU recording's float32 settings
(`experiments.torchrun_times.SETTINGS`), end with the same weights on every rank and within
1e-5 of one process training on the whole batches; our DDP in float64 within 1e-12. One
process more than there are GPUs is refused in one line, naming the count to use.
"""

from __future__ import annotations

import subprocess

import pytest
import torch

from experiments.torchrun_times import SETTINGS, run_once
from learn_parallel.lab.processes import NCCL_ENV
from learn_parallel.ladder import launch

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _nccl_settings(monkeypatch):
    for name, value in NCCL_ENV.items():  # torchrun's ranks inherit them
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    "ddp, settings",
    [("ours", SETTINGS), ("torch", SETTINGS), ("ours", [])],
    ids=["ours, float32", "torch, float32", "ours, float64"],
)
def test_every_gpu_trains_like_one_process(ddp, settings):
    gpus = torch.cuda.device_count()
    run = run_once(gpus, ddp, settings, "cuda", timeout_s=240)
    assert run["status"] == "ok", run.get("output_tail")
    assert run["devices"] == [f"cuda:{k}" for k in range(gpus)]
    assert run["same_training"], run
    assert run["across_ranks"] == 0.0  # the all-reduce hands every rank the same sums
    assert run["one_process"] <= run["tolerance"] == (1e-5 if settings else 1e-12)


def test_more_processes_than_gpus_is_refused_in_one_line():
    gpus = torch.cuda.device_count()
    command = launch.torchrun_command(gpus + 1, args=["--device", "cuda"])
    done = subprocess.run(launch.runnable(command), capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    wanted = (
        f"learn_parallel.ladder.train: {gpus + 1} processes on this node (--nproc-per-node "
        f"{gpus + 1}) but {gpus} GPUs visible, and each process needs one: use "
        f"--nproc-per-node {gpus} or fewer, or --device cpu"
    )
    assert wanted in done.stderr.splitlines(), done.stderr[-3000:]
