"""libtorch's replicate strategy (`clone_replicate`), on simulated devices, in float64.

Training through ``CloneDataParallel`` must equal training on one
device: outputs, gradients and weights after three SGD steps (tolerance as in
test_equivalence.py). Tied weights, buffers and double backward are pinned
down for both strategies.
"""

import _training
import pytest
import torch
from _training import TOL, assert_same
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import resolve_devices
from learn_parallel.variants.clone_replicate import ReduceAddEdge, clone_replicate, clone_to

# The two replicate strategies: PyTorch's Broadcast (the base class) and libtorch's clone.
WRAPPERS = {"broadcast": lp.DataParallel, "clone": lp.CloneDataParallel}


def source(devices):
    """device_ids[0] as a torch device: the module must live there before replicating."""
    return resolve_devices(devices)[0].torch_device


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()


class Tied(nn.Module):
    """An encoder and decoder sharing one weight matrix (as language models tie embeddings)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encode = nn.Linear(6, 4, bias=False)
        self.decode = nn.Linear(4, 6, bias=False)
        self.decode.weight = self.encode.weight  # now the same Parameter, used transposed below

    def forward(self, x):
        return torch.tanh(self.encode(x)) @ self.decode.weight


def batches(n=8, steps=3, features=5):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(n, features, generator=g, dtype=torch.double),
         torch.randn(n, 3, generator=g, dtype=torch.double))
        for _ in range(steps)
    ]  # fmt: skip


def train(model, forward, data):
    def run(batch):
        x, y = batch
        out = forward(x)
        return out, (out[:, : y.shape[1]] - y.to(out.device)).pow(2).mean()

    return _training.train(model, run, data)


@pytest.mark.parametrize("devices", [[0], [0, 1], [0, 1, 2, 3], [2, 0, 3]])
def test_clone_strategy_trains_like_one_device(devices):
    reference = mlp()
    expected = train(reference, reference, batches())
    model = mlp().to(source(devices))
    if len(devices) == 1:
        # DataParallel skips replicate on one device: drive the replica directly.
        def forward(x):
            return clone_replicate(model, devices)[0](x.to(source(devices)))
    else:
        forward = lp.CloneDataParallel(model, device_ids=devices)
    assert_same(train(model, forward, batches()), expected)


def test_each_replica_parameter_has_one_reduce_add_edge_to_the_original():
    model = mlp().to(source([0, 1, 2]))
    replicas = clone_replicate(model, [0, 1, 2])
    for name, original in model.named_parameters():
        nodes = {dict(replica.named_parameters())[name].grad_fn for replica in replicas}
        assert len(nodes) == 1  # one node shared by every replica of this parameter
        (node,) = nodes
        assert type(node).__name__ == "ReduceAddEdgeBackward"
        edges = [fn for fn, _ in node.next_functions if fn is not None]
        assert len(edges) == 1 and edges[0].variable is original
    for replica in replicas:
        assert all(not p.is_leaf for p in replica.parameters())


def test_clones_are_copies_on_their_devices():
    model = mlp().to(source([0, 1]))
    replicas = clone_replicate(model, [0, 1])
    for replica, device in zip(replicas, resolve_devices([0, 1]), strict=True):
        for p, q in zip(replica.parameters(), model.parameters(), strict=True):
            assert p.device == device.torch_device
            assert torch.equal(p.cpu(), q.cpu()) and p.data_ptr() != q.data_ptr()
    assert replicas[0] is not model


def test_frozen_parameters_get_no_edge_and_no_gradient():
    model = mlp().to(source([0, 1]))
    model[0].weight.requires_grad_(False)
    replicas = clone_replicate(model, [0, 1])
    assert replicas[1][0].weight.grad_fn is None and not replicas[1][0].weight.requires_grad
    first, second = (d.torch_device for d in resolve_devices([0, 1]))
    x = batches()[0][0]
    out = torch.cat([replicas[0](x[:4].to(first)), replicas[1](x[4:].to(second)).to(first)])
    out.sum().backward()
    assert model[0].weight.grad is None and model[2].weight.grad is not None


@pytest.mark.parametrize("strategy", ["broadcast", "clone"])
def test_tied_weights_stay_tied_and_train_like_one_device(strategy):
    tied = Tied().double().to(source([0, 1]))
    replicas = WRAPPERS[strategy](tied, [0, 1]).replicate(tied, [0, 1])
    for replica in replicas:
        assert replica.encode.weight is replica.decode.weight
    reference = Tied().double()
    expected = train(reference, reference, batches(features=6))
    model = Tied().double().to(source([0, 1, 2]))
    dp = WRAPPERS[strategy](model, device_ids=[0, 1, 2])
    assert_same(train(model, dp, batches(features=6)), expected)


def test_batchnorm_statistics_broadcast_keeps_replica_0s_clone_keeps_none():
    x = batches()[0][0]
    stats = {}
    for strategy in WRAPPERS:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)).double().to(source([0, 1]))
        WRAPPERS[strategy](model, device_ids=[0, 1])(x)
        stats[strategy] = (model[1].running_mean.cpu(), int(model[1].num_batches_tracked))
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)).double()
    reference(x[:4])  # replica 0's half of the batch
    torch.testing.assert_close(stats["broadcast"][0], reference[1].running_mean, **TOL)
    assert stats["broadcast"][1] == 1
    assert torch.equal(stats["clone"][0], torch.zeros(4, dtype=torch.double))
    assert stats["clone"][1] == 0


def test_buffers_that_require_grad_are_wired_like_parameters():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            scale = torch.tensor(2.0, dtype=torch.double, device=source([0, 1]))
            self.register_buffer("scale", scale.requires_grad_())

        def forward(self, x):
            return x * self.scale

    module = Scaled()
    x = batches()[0][0]
    lp.CloneDataParallel(module, [0, 1])(x).sum().backward()
    torch.testing.assert_close(module.scale.grad.cpu(), x.sum(), **TOL)


@pytest.mark.parametrize("strategy", ["broadcast", "clone"])
def test_double_backward_matches_one_device(strategy):
    x = batches()[0][0]

    def second_order(model, forward):
        params = list(model.parameters())
        grads = torch.autograd.grad(forward(x).pow(2).sum(), params, create_graph=True)
        return torch.autograd.grad(sum(g.pow(2).sum() for g in grads), params)

    reference = mlp()
    expected = second_order(reference, reference)
    model = mlp().to(source([0, 1, 2]))
    got = second_order(model, WRAPPERS[strategy](model, [0, 1, 2]))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a.cpu(), b, **TOL)


def test_no_grad_replicas_have_no_edges():
    with torch.no_grad():
        replicas = clone_replicate(mlp().to(source([0, 1])), [0, 1], detach=False)
    assert all(p.grad_fn is None for r in replicas for p in r.parameters())
    model = mlp().to(source([0, 1]))
    replicas = clone_replicate(model, [0, 1], detach=True)
    assert all(p.grad_fn is None for r in replicas for p in r.parameters())


def test_reduce_add_edge_sums_onto_the_source():
    original = torch.zeros(3, dtype=torch.double, requires_grad=True)
    clones = [torch.zeros(3, dtype=torch.double) for _ in range(3)]
    outs = ReduceAddEdge.apply(torch.device("cpu"), original, *clones)
    sum((i + 1) * o.sum() for i, o in enumerate(outs)).backward()
    torch.testing.assert_close(original.grad, torch.full((3,), 6.0, dtype=torch.double))


def test_the_strategy_is_a_subclass_not_a_keyword():
    with pytest.raises(TypeError, match="replicate"):
        lp.DataParallel(mlp(), [0, 1], replicate="clone")  # torch's signature: 4 arguments
    assert lp.CloneDataParallel.replicate is not lp.DataParallel.replicate


def test_clone_to_keeps_shared_submodules_shared():
    layer = nn.Linear(2, 2)
    twice = nn.Sequential(layer, nn.Tanh(), layer)
    copied = clone_to(twice, lp.Device("sim", 1))
    assert copied[0] is copied[2] and copied[0] is not layer
