"""The chapters' device plan (learn_parallel/lab/chapter.py) on a machine without GPUs.

The decision for 0, 1, 2 and 8 GPUs is tested here with the GPU count faked, and so is the
one-GPU plan's line; tests/gpu/test_gpu_one.py runs the one-GPU plan on a GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import learn_parallel as lp

PLAN = "from learn_parallel.lab.chapter import PLAN, GPU, HARDWARE\nprint(PLAN.summary())\n"
THREADS = "import torch\nassert torch.get_num_threads() == 1, torch.get_num_threads()\n"


def plan_output(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    done = subprocess.run(
        [sys.executable, "-c", PLAN + "print(HARDWARE, GPU)\n" + THREADS],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the plan without GPUs")
@pytest.mark.parametrize("count", ["2", "3", "4", None])
def test_without_gpus_the_chapters_use_the_simulated_devices_asked_for(count):
    out = plan_output(**({"LEARN_PARALLEL_SIMULATED_DEVICES": count} if count else {}))
    n = int(count or 4)
    names = ", ".join(f"sim:{i} (simulated on the CPU)" for i in range(n))
    cores = os.cpu_count()
    assert out.splitlines() == [
        f"{n} devices: {names}",
        "Simulated devices, as this machine has no GPU.",
        "CPU timings: one thread per simulated device and for the one-device baseline "
        f"(torch.set_num_threads(1)); this machine has {cores} core{'s' if cores != 1 else ''}.",
        f"{n} simulated CPU devices None",  # no clock: each measurement names its own
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="fakes one GPU where there is none")
def test_with_one_gpu_the_plan_says_the_gpu_only_times_a_copy():
    # torch's CUDA queries faked before the setup reads them: tests/gpu/test_gpu_one.py runs
    # the same plan on a real GPU.
    fake = (
        "import torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 1\n"
        "torch.cuda.get_device_name = lambda device=None: 'Fake GPU'\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    done = subprocess.run(
        [sys.executable, "-c", fake + PLAN + "print(GPU)\n"],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[1] == (
        "Simulated devices, as this machine has 1 GPU. GPU = cuda:0 (Fake GPU): only the devices"
        " chapter uses it, to time a copy to it."
    ), done.stdout
    assert lines[-1] == "cuda:0"
    assert "baseline" not in lines[1]  # the one-device baselines run on sim:0, not on the GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="the plan without GPUs")
def test_one_simulated_device_is_raised_to_two_and_the_plan_says_so():
    out = plan_output(LEARN_PARALLEL_SIMULATED_DEVICES="1")
    assert out.splitlines()[0].startswith("2 devices: sim:0")
    assert "LEARN_PARALLEL_SIMULATED_DEVICES=1 raised to 2, so a batch can be split" in out


def test_a_bad_device_count_is_one_line_naming_the_variable():
    done = subprocess.run(
        [sys.executable, "-c", PLAN],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LEARN_PARALLEL_SIMULATE": "1", "LEARN_PARALLEL_SIMULATED_DEVICES": "x"},
    )
    assert done.returncode != 0
    assert "LEARN_PARALLEL_SIMULATED_DEVICES='x' is not a positive integer" in done.stderr


def test_first_device_is_where_device_ids_none_starts():
    assert lp.first_device() == torch.device("sim", 0)  # the tests run on simulated devices
    assert lp.DataParallel(nn.Linear(2, 2).to(lp.first_device())).device_ids[0] in (0, "sim:0")


def test_a_meta_layer_on_one_device_is_named_at_construction():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)).to(lp.first_device())
    model[1].running_mean = torch.zeros(8, device="meta")
    with pytest.raises(ValueError, match=r"buffer '1.running_mean' is on the meta device"):
        lp.DataParallel(model, device_ids=[0])


@pytest.mark.parametrize(
    ("gpus", "simulated", "line"),
    [
        (0, True, "Simulated devices, as this machine has no GPU."),
        (1, True, "Simulated devices, as this machine has 1 GPU."),
        (2, False, "2 GPUs: the lessons run on them."),
        (8, False, "8 GPUs: the lessons run on them."),
    ],
)
def test_the_plan_decision_for_each_gpu_count(monkeypatch, gpus, simulated, line):
    # The decision alone, with the GPU count faked: GPUs from two up run the lessons;
    # one GPU (Colab) or none switches this process, and what it starts, to simulated devices.
    from learn_parallel.devices import simulate_for_lessons

    monkeypatch.delenv("LEARN_PARALLEL_SIMULATE", raising=False)
    monkeypatch.delenv("LEARN_PARALLEL_SIMULATED_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert simulate_for_lessons(2) == line
    assert (os.environ.get("LEARN_PARALLEL_SIMULATE") == "1") is simulated


def test_forcing_simulation_beside_gpus_is_said(monkeypatch):
    from learn_parallel.devices import simulate_for_lessons

    monkeypatch.setenv("LEARN_PARALLEL_SIMULATE", "1")
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert simulate_for_lessons(2) == (
        "Simulated devices, as LEARN_PARALLEL_SIMULATE=1 (2 GPUs visible); "
        "LEARN_PARALLEL_SIMULATED_DEVICES=1 raised to 2, so a batch can be split."
    )
    assert os.environ["LEARN_PARALLEL_SIMULATED_DEVICES"] == "2"
