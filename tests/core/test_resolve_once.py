"""Devices are resolved once, in __init__; a step walks the module's parameters once."""

import torch
from torch import nn

import learn_parallel as lp
from experiments.counting import counting


class CountingSequential(nn.Sequential):
    """Counts the walks over the module tree started at the root."""

    def __init__(self, *modules):
        super().__init__(*modules)
        self.walks = {"named_modules": 0, "named_parameters": 0, "named_buffers": 0}

    def named_modules(self, *args, **kwargs):
        self.walks["named_modules"] += 1
        return super().named_modules(*args, **kwargs)

    def named_parameters(self, *args, **kwargs):
        self.walks["named_parameters"] += 1
        return super().named_parameters(*args, **kwargs)

    def named_buffers(self, *args, **kwargs):
        self.walks["named_buffers"] += 1
        return super().named_buffers(*args, **kwargs)


def test_a_training_step_resolves_no_device_and_walks_the_module_once():
    net = CountingSequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    net.to(lp.Device("sim", 0).torch_device)  # device_ids[0]
    dp = lp.DataParallel(net, [0, 1, 2, 3])
    x = torch.randn(8, 3)
    dp(x).sum().backward()  # the first step may start the workers
    net.walks = {"named_modules": 0, "named_parameters": 0, "named_buffers": 0}
    with counting("to_device") as calls:
        dp(x).sum().backward()
    assert calls[0] == 0, f"{calls[0]} calls to to_device in one step"
    assert net.walks == {"named_modules": 1, "named_parameters": 0, "named_buffers": 0}
