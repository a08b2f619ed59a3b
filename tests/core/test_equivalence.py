"""The core promise: training with DataParallel equals training on one device.

Everything runs in float64, so the only differences are the order of floating
point sums (gradients are summed per replica, then across replicas). Tolerance:
rtol=1e-10, atol=1e-12 on outputs, gradients and parameters after each step.
"""

import copy

import _training
import pytest
import torch
from _training import TOL, SimDevices, assert_same
from torch import nn

import learn_parallel as lp

SIM = SimDevices(4)  # SIM[0] is device_ids[0]: models live there, outputs land there


class Nested(nn.Module):
    """Takes nested inputs and keyword arguments, returns a nested output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 8)
        self.b = nn.Linear(3, 8)
        self.head = nn.Sequential(nn.Tanh(), nn.Linear(8, 2))

    def forward(self, pair, extra, scale=1.0, mask=None):
        x, y = pair
        hidden = self.a(x) + self.b(extra["features"]) * scale
        if mask is not None:
            hidden = hidden * mask
        out = self.head(hidden)
        return {"out": out, "parts": (hidden, out.sum(dim=1, keepdim=True))}


def make_batch(n, generator):
    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.double)

    return (
        ((randn(n, 5), randn(n, 4)), {"features": randn(n, 3), "tag": "batch"}),
        {"scale": 0.5, "mask": (randn(n, 8) > -1).double()},
    )


def loss_of(output):
    return output["out"].pow(2).mean() + output["parts"][0].abs().mean() + output["parts"][1].mean()


def train(model, forward, batches):
    def run(batch):
        args, kwargs = batch
        output = forward(*args, **kwargs)
        return output, loss_of(output)

    return _training.train(model, run, batches)


@pytest.mark.parametrize("devices", [1, 2, 3, 4])
@pytest.mark.parametrize("batch", [12, 10, 3], ids=["even", "uneven", "small"])
def test_training_matches_one_device(devices, batch):
    torch.manual_seed(0)
    reference = Nested().double()
    parallel = copy.deepcopy(reference)
    batches = [make_batch(batch, torch.Generator().manual_seed(s)) for s in range(3)]

    dp = lp.DataParallel(parallel.to(SIM[0]), device_ids=list(range(devices)))
    expected = train(reference, reference, batches)
    got = train(parallel, dp, batches)
    assert got[0][0][0]["out"].device == SIM[0]  # gathered onto device_ids[0]
    assert all(p.device == SIM[0] for p in got[1])
    assert_same(got, expected)


def test_functional_data_parallel_matches_one_device():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1)).double()
    x = torch.randn(11, 4, dtype=torch.double)
    reference = copy.deepcopy(net)
    out = lp.data_parallel(net.to(SIM[0]), x, device_ids=[0, 1, 2])
    out.sum().backward()
    single = reference(x)
    single.sum().backward()
    assert out.device == SIM[0]
    torch.testing.assert_close(out.cpu(), single, **TOL)
    for p, q in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)


def test_functional_data_parallel_passes_module_kwargs():
    class Shift(nn.Module):
        def forward(self, x, shift):
            return x + shift

    out = lp.data_parallel(Shift(), torch.zeros(4, 1), [0, 1], module_kwargs={"shift": 2.0})
    assert out.flatten().tolist() == [2.0] * 4


def test_gather_dim_and_output_device_are_honoured():
    net = nn.Linear(3, 2).double()
    x = torch.randn(2, 6, 3, dtype=torch.double)  # batch along dim 1
    reference = copy.deepcopy(net)
    out = lp.DataParallel(net.to(SIM[0]), [0, 1, 2], output_device="cpu", dim=1)(x)
    torch.testing.assert_close(out, reference(x), **TOL)  # both on the CPU


def test_no_inputs_run_once_on_the_first_device():
    class Constant(nn.Module):
        def __init__(self):
            super().__init__()
            self.value = nn.Parameter(torch.ones(2))

        def forward(self):
            return self.value * 3

    out = lp.DataParallel(Constant().to(SIM[0]), [0, 1, 2])()
    assert out.device == SIM[0] and out.tolist() == [3.0, 3.0]


def test_source_device_check_names_the_tensor_and_the_fix():
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).to(SIM[0])
    net[1].to("meta")
    dp = lp.DataParallel(net, [0, 1])
    with pytest.raises(
        RuntimeError,
        match=r"on device sim:0 \(device_ids\[0\]\) but parameter '1.weight' is on meta\. "
        r"Move the module there.*module.to\('sim:0'\)",
    ):
        dp(torch.ones(4, 2))
    net[1].weight = nn.Parameter(torch.ones(2, device=SIM[0]))
    net[1].bias = nn.Parameter(torch.zeros(2, device=SIM[0]))
    with pytest.raises(RuntimeError, match="but buffer '1.running_mean' is on meta"):
        dp(torch.ones(4, 2))


def test_source_device_check_on_several_devices_runs_in_replicate_after_scatter():
    calls = []

    class Own(lp.DataParallel):
        def scatter(self, inputs, kwargs, device_ids):
            calls.append("scatter")
            return super().scatter(inputs, kwargs, device_ids)

        def replicate(self, module, device_ids):
            calls.append("replicate")
            raise LookupError("replicate without the parent's")

    net = nn.Linear(2, 2).to(SIM[0])
    parent, own, own_one = lp.DataParallel(net, [0, 1]), Own(net, [0, 1]), Own(net, [0])
    net.bias = nn.Parameter(torch.zeros(2, device="meta"))  # misplaced after wrapping
    with pytest.raises(RuntimeError, match="parameter 'bias' is on meta"):
        parent(torch.ones(4, 2))  # the parent's replicate checks
    with pytest.raises(LookupError):  # no check before the override: it is the first to fail
        own(torch.ones(4, 2))
    assert calls == ["scatter", "replicate"]
    calls.clear()
    with pytest.raises(RuntimeError, match="parameter 'bias' is on meta"):
        own_one(torch.ones(4, 2))  # one device: forward checks, before scatter
    assert calls == []


def test_no_grad_forward_builds_no_graph():
    net = nn.Linear(3, 1).to(SIM[0])
    with torch.no_grad():
        out = lp.DataParallel(net, [0, 1])(torch.randn(4, 3))
    assert out.grad_fn is None and not out.requires_grad


def test_steps_can_be_overridden_like_in_pytorch():
    calls = []

    class Logged(lp.DataParallel):
        def scatter(self, inputs, kwargs, device_ids):
            calls.append(("scatter", list(device_ids)))
            return super().scatter(inputs, kwargs, device_ids)

        def replicate(self, module, device_ids):
            calls.append(("replicate", list(device_ids)))
            return super().replicate(module, device_ids)

        def parallel_apply(self, replicas, inputs, kwargs):
            calls.append(("parallel_apply", len(replicas)))
            return super().parallel_apply(replicas, inputs, kwargs)

        def gather(self, outputs, output_device):
            calls.append(("gather", str(output_device)))
            return super().gather(outputs, output_device)

    Logged(nn.Linear(2, 1).to(SIM[0]), [0, 1, 2])(torch.ones(2, 2))
    assert calls == [
        ("scatter", [0, 1, 2]),
        ("replicate", [0, 1]),
        ("parallel_apply", 2),
        ("gather", "sim:0"),
    ]
