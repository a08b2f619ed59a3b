"""replicate(): own parameter copies per device, gradients summed back, tied weights tied."""

import copy

import pytest
import torch
from _training import SimDevices
from torch import nn
from torch.autograd import gradcheck, gradgradcheck

import learn_parallel as lp
from learn_parallel.devices import Device
from learn_parallel.replicate import Broadcast

SIM = SimDevices(4)  # replicate copies from SIM[0]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).to(SIM[0])


def test_every_replica_has_its_own_parameters_wired_to_the_original():
    net = model()
    replicas = lp.replicate(net, [0, 1, 2])
    assert len(replicas) == 3
    original = net[0].weight
    copies = [r[0].weight for r in replicas]
    assert [c.device for c in copies] == SIM[:3]
    assert all(torch.equal(c.cpu(), original.cpu()) for c in copies)
    assert copies[0].data_ptr() == original.data_ptr()  # replica 0 shares storage
    assert len({c.data_ptr() for c in copies}) == 3  # the others are real copies
    assert all(c.grad_fn is not None and not c.is_leaf for c in copies)


def test_gradients_from_all_replicas_sum_into_the_original():
    net = nn.Linear(3, 1, bias=False).to(SIM[0])
    replicas = lp.replicate(net, [0, 1])
    x = torch.ones(1, 3)
    # Each replica's input on its own device; the two losses meet on the source device.
    (replicas[0](x.to(SIM[0])).sum() + 2 * replicas[1](x.to(SIM[1])).sum().to(SIM[0])).backward()
    assert net.weight.grad.tolist() == [[3.0, 3.0, 3.0]]


def test_tied_weights_stay_tied():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.out = nn.Linear(3, 5, bias=False)
            self.out.weight = self.embed.weight

    for replica in lp.replicate(Tied().to(SIM[0]), [0, 1]):
        assert replica.out.weight is replica.embed.weight


def test_shared_submodules_stay_shared():
    layer = nn.Linear(2, 2)
    net = nn.Sequential(layer, nn.ReLU(), layer).to(SIM[0])
    for replica in lp.replicate(net, [0, 1]):
        assert replica[0] is replica[2] and replica[0] is not layer


def test_replica_parameters_are_visible_in_forward():
    class UsesParameters(nn.Linear):
        def forward(self, x):
            # A common pattern that finds no parameters in PyTorch's replicas.
            return x.to(next(self.parameters()).dtype) @ self.weight.t()

    net = UsesParameters(2, 1).to(SIM[0])
    replicas = lp.replicate(net, [0, 1])
    assert [len(list(r.parameters())) for r in replicas] == [2, 2]
    out = lp.DataParallel(net, [0, 1])(torch.ones(4, 2, dtype=torch.int64))
    assert out.shape == (4, 1)


def test_buffers_are_copied_and_only_replica_zero_shares_them():
    net = model()
    replicas = lp.replicate(net, [0, 1])
    original = net[1].running_mean
    assert replicas[0][1].running_mean.data_ptr() == original.data_ptr()
    assert replicas[1][1].running_mean.data_ptr() != original.data_ptr()
    assert not replicas[1][1].running_mean.requires_grad


def test_batchnorm_statistics_survive_only_from_replica_zero():
    # A known DataParallel pitfall, kept faithfully: replica 1's statistics are lost.
    net = model().train()
    x = torch.cat([torch.zeros(4, 3), torch.full((4, 3), 10.0)])
    lp.DataParallel(net, [0, 1])(x)
    only_first_half = model().train()
    only_first_half(x[:4].to(SIM[0]))
    assert torch.allclose(net[1].running_mean, only_first_half[1].running_mean)


def test_detach_under_no_grad():
    replicas = lp.replicate(model(), [0, 1], detach=True)
    assert all(not p.requires_grad for r in replicas for p in r.parameters())


def test_frozen_parameters_stay_frozen():
    net = nn.Linear(2, 2).to(SIM[0])
    net.bias.requires_grad_(False)
    replicas = lp.replicate(net, [0, 1])
    assert all(r.weight.requires_grad and not r.bias.requires_grad for r in replicas)


def test_lazy_modules_are_refused():
    with pytest.raises(RuntimeError, match=r"uninitialized \(lazy\) parameter 'weight'.*forward"):
        lp.replicate(nn.LazyLinear(2), [0, 1])


def test_a_lazy_module_on_one_device_initializes_in_its_first_call_as_in_torch():
    x = torch.ones(2, 4, device=SIM[0])
    wrappers = (lp.DataParallel, torch.nn.DataParallel)
    ours, theirs = (w(nn.LazyLinear(3).to(SIM[0]), device_ids=[0]) for w in wrappers)
    assert ours(x).shape == theirs(x).shape == (2, 3)
    assert ours.module.weight.shape == (3, 4)
    with pytest.raises(RuntimeError, match=r"uninitialized \(lazy\) parameter 'weight'"):
        lp.DataParallel(nn.LazyLinear(3).to(SIM[0]), device_ids=[0, 1])(x)  # copies: refused


def test_module_must_be_on_the_first_device():
    net = nn.Linear(2, 2).to("meta")
    with pytest.raises(
        RuntimeError,
        match="on device sim:0 \\(device_ids\\[0\\]\\) but parameter 'weight' is on meta",
    ):
        lp.replicate(net, [0, 1])


def test_zero_grad_on_a_replica_warns():
    """torch's Module.zero_grad says it does nothing on a replica, then, reading each
    parameter's .grad, warns once per parameter that it is no leaf (as on GPUs): all three
    are asserted here, so none reaches the test summary."""
    replica = lp.replicate(nn.Linear(2, 2).to(SIM[0]), [0, 1])[1]
    with pytest.warns(UserWarning) as caught:
        replica.zero_grad()
    first, *per_parameter = [str(w.message) for w in caught]
    assert first.startswith("Calling .zero_grad() from a module created with nn.DataParallel()")
    assert len(per_parameter) == len(list(replica.parameters())) == 2
    for message in per_parameter:
        assert message.startswith("The .grad attribute of a Tensor that is not a leaf Tensor")


def test_broadcast_gradcheck_and_gradgradcheck():
    devices = [Device("sim", 0), Device("sim", 1), Device("sim", 2)]
    a = torch.randn(3, 2, dtype=torch.double, device=SIM[0], requires_grad=True)
    b = torch.randn(4, dtype=torch.double, device=SIM[0], requires_grad=True)

    def weighted_copies(a, b):
        copies = Broadcast.apply(devices, a, b)
        # Each copy lives on its own device: bring the terms home before summing.
        return sum((i + 1) * (c.sum() * c.sum()).to(SIM[0]) for i, c in enumerate(copies))

    assert gradcheck(weighted_copies, (a, b))
    assert gradgradcheck(weighted_copies, (a, b))


def test_modules_that_override_the_shallow_copy_still_work():
    # nn.LSTM overrides _replicate_for_data_parallel to copy its list of weights.
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True).double()
    reference = copy.deepcopy(lstm)
    x = torch.randn(6, 5, 3, dtype=torch.double)
    out, _ = lp.DataParallel(lstm.to(SIM[0]), [0, 1, 2])(x)
    out.sum().backward()
    expected, _ = reference(x)
    expected.sum().backward()
    assert out.device == SIM[0]
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-10, atol=1e-12)
    for p, q in zip(lstm.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-10, atol=1e-12)
    replica = lp.replicate(lstm, [0, 1])[1]
    assert replica._flat_weights[0] is replica.weight_ih_l0
    assert lstm._flat_weights[0] is lstm.weight_ih_l0  # the original's list untouched


def test_replicas_share_hooks_and_python_attributes():
    net = nn.Linear(2, 2).to(SIM[0])
    net.note = "kept"
    calls = []
    net.register_forward_hook(lambda module, args, out: calls.append(module))
    replicas = lp.replicate(net, [0, 1])
    assert all(r.note == "kept" for r in replicas)
    for r, device in zip(replicas, SIM):
        r(torch.ones(1, 2, device=device))
    assert calls == replicas


def test_replicas_on_simulated_devices_are_views_into_one_flat_buffer_per_dtype():
    """As torch's replicate gives on GPUs: both go through broadcast_coalesced, which packs
    each dtype's parameters into one buffer per device (these are far below its 10 MiB)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2).double()).to(SIM[0])
    ours = lp.replicate(net, [0, 1, 2])
    torchs = torch.nn.parallel.replicate(net, SIM[:3])
    for replicas in (ours, torchs):
        assert replicas[0][0].weight.data_ptr() == net[0].weight.data_ptr()  # the originals
        for replica in replicas[1:]:
            params = [p for layer in replica for p in (layer.weight, layer.bias)]  # copies
            for layer, dtype in ((replica[0], torch.float32), (replica[1], torch.float64)):
                pair = (layer.weight, layer.bias)
                assert len({p.untyped_storage().data_ptr() for p in pair}) == 1
                assert [p.storage_offset() for p in pair] == [0, layer.weight.numel()]
                assert layer.weight.dtype == dtype  # weight, then bias, end to end
            assert len({p.untyped_storage().data_ptr() for p in params}) == 2  # one per dtype
    layout = [[(p.storage_offset(), p.shape) for p in r.parameters()] for r in ours]
    torch_layout = [[(r[i].weight, r[i].bias) for i in (0, 1)] for r in torchs]
    assert layout == [[(p.storage_offset(), p.shape) for ps in r for p in ps] for r in torch_layout]
