"""A batch's route through DataParallel.forward: torch's int ids checked by the steps that
take them, the devices of __init__ passed on where torch passes none; the module walked once
per step; the input structure walked once, and checked before any copy."""

import sys
from collections import Counter

import pytest
import torch
from torch import nn

import learn_parallel as lp
from experiments.counting import counting
from learn_parallel import nested, scatter_gather

# The module, not the function of the same name that the package exports.
data_parallel = sys.modules["learn_parallel.data_parallel"]


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


def test_a_training_step_parses_only_torchs_int_ids_and_walks_the_module_once():
    net = CountingSequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    net.to(lp.Device("sim", 0).torch_device)  # device_ids[0]
    dp = lp.DataParallel(net, [0, 1, 2, 3])
    x = torch.randn(8, 3)
    dp(x).sum().backward()  # the first step may start the workers
    net.walks = {"named_modules": 0, "named_parameters": 0, "named_buffers": 0}
    with counting("_parse") as parsed:
        dp(x).sum().backward()
    # scatter and replicate take int ids, as torch's do, and check each (4 ids each);
    # parallel_apply and gather get the Devices of __init__, which pass unchanged.
    assert parsed[0] == 2 * 4, f"{parsed[0]} ids parsed in one step"
    assert net.walks == {"named_modules": 1, "named_parameters": 0, "named_buffers": 0}


def test_the_steps_get_torchs_ids_or_the_devices_resolved_in_init(monkeypatch):
    """scatter and replicate receive the int ids; parallel_apply __init__'s own Devices."""
    received = {}
    # The function each step calls, and the position of its devices argument.
    for name, position in (("scatter_kwargs", 2), ("make_replicas", 1), ("parallel_apply", 3)):
        original = getattr(data_parallel, name)

        def spy(*args, _name=name, _position=position, _original=original, **kwargs):
            received[_name] = args[_position]
            return _original(*args, **kwargs)

        monkeypatch.setattr(data_parallel, name, spy)
    dp = lp.DataParallel(nn.Linear(3, 1).to(lp.Device("sim", 2).torch_device), [2, 0, 1, 3])
    dp(torch.randn(3, 3))  # three rows: three replicas
    assert received["scatter_kwargs"] == [2, 0, 1, 3] == dp.device_ids
    assert received["make_replicas"] == [2, 0, 1]
    devices = received["parallel_apply"]
    assert len(devices) == 3 and all(a is b for a, b in zip(devices, dp.devices))


def test_the_input_structure_is_walked_once(monkeypatch):
    """scatter looks at each part of the input once: no second pass to check sizes."""
    looked_at = Counter()
    members = nested.members

    def counted(obj):
        looked_at[id(obj)] += 1
        return members(obj)

    monkeypatch.setattr(nested, "members", counted)
    text, options = "mode", ("train", 1)  # a container with no tensor inside is shared whole
    inner = [torch.randn(8, 2), text]
    batch = {"x": torch.randn(8, 3), "more": inner}
    parts = [batch, inner, text, options]

    class Uses(nn.Module):
        def forward(self, x, batch, options, scale):
            return x + batch["x"].sum(1, keepdim=True) * scale

    dp = lp.DataParallel(Uses(), [0, 1, 2, 3])
    out = dp(torch.randn(8, 1), batch, options, scale=torch.tensor(2.0))
    assert out.shape == (8, 1)
    assert [looked_at[id(part)] for part in parts] == [1, 1, 1, 1]


def test_sizes_are_checked_before_anything_is_copied(monkeypatch):
    copies = []
    scatter_apply = scatter_gather.Scatter.apply

    class Spy:
        @staticmethod
        def apply(*args):
            copies.append(args)
            return scatter_apply(*args)

    to = torch.Tensor.to

    def counted_to(self, *args, **kwargs):
        copies.append(args)
        return to(self, *args, **kwargs)

    monkeypatch.setattr(scatter_gather, "Scatter", Spy)
    monkeypatch.setattr(torch.Tensor, "to", counted_to)
    with pytest.raises(ValueError, match=r"argument 0 has 8, argument 2 has 7"):
        lp.scatter_kwargs((torch.randn(8), torch.tensor(1.0), torch.randn(7)), {}, [0, 1, 2, 3])
    assert copies == []
