"""The step engine's CPU thread policy: one thread per simulated device, GPUs left alone.

On a busy 2-core machine torch's intra-op pool made one device's step slower than two
devices' (issue 34): every wrapper and baseline now times with one thread per device,
set in one place, and says so in one line.
"""

import torch

from learn_parallel.lab import steps


def test_simulated_devices_time_with_one_thread_each_and_say_so(monkeypatch):
    before = torch.get_num_threads()
    try:
        line = steps.one_thread_per_device()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert line.startswith("CPU timings: one thread per simulated device and for the one-device")
    assert "\n" not in line


def test_gpus_keep_torch_s_threads(monkeypatch):
    monkeypatch.setattr(steps, "device_type", lambda: "cuda")
    before = torch.get_num_threads()
    assert steps.one_thread_per_device() == ""
    assert torch.get_num_threads() == before
