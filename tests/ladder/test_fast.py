"""FastDataParallel's rungs on simulated devices, in float64, against one-device training.

Kept replicas and overlapped reduction run on the CPU too (CUDA graphs are
tested in test_gpu_bridges.py); each must equal one-device training: outputs,
gradients and weights after three SGD steps with momentum (tolerance as in
test_equivalence.py). The preconditions that can be checked are refused with
errors that name the fix. Its buckets are `buckets.plan_buckets`'s (DDP's rule per
dtype), and it checks its devices as every wrapper does.
"""

import contextlib
import importlib
import threading

import _training
import pytest
import torch
from _training import TOL, assert_same
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import resolve_devices
from learn_parallel.ladder.buckets import plan_buckets
from learn_parallel.ladder.fast import FastDataParallel
from learn_parallel.ladder.graphs import ReplicaGraphs

RUNGS = {
    "kept_replicas": {"overlap_reduce": False},
    "overlap_reduce": {"overlap_reduce": True, "bucket_mb": 0.0005},
}


def source(devices):
    """device_ids[0] as a torch device: the module must live there before wrapping."""
    return resolve_devices(devices)[0].torch_device


def net(batch_norm=False, on=None):
    """The model, on the CPU (one-device reference) or on device ``on[0]`` (to be wrapped)."""
    torch.manual_seed(0)
    norm = [nn.BatchNorm1d(16)] if batch_norm else []
    model = nn.Sequential(nn.Linear(6, 16), *norm, nn.ReLU(), nn.Linear(16, 3)).double()
    return model if on is None else model.to(source(on))


def batches(n=12, steps=3):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(n, 6, generator=g, dtype=torch.double), torch.randint(0, 3, (n,), generator=g))
        for _ in range(steps)
    ]


def train(model, forward, data=None):
    def run(batch):
        x, y = batch
        out = forward(x)
        return out, nn.functional.cross_entropy(out, y.to(out.device))

    return _training.train(model, run, data or batches())


def one_device(batch_norm=False):
    model = net(batch_norm)
    return train(model, model)


@pytest.mark.parametrize("rung", list(RUNGS))
@pytest.mark.parametrize("devices", [[0, 1], [0, 1, 2, 3], [2, 0, 3]])
def test_rung_trains_like_one_device(rung, devices):
    model = net(on=devices)
    fast = FastDataParallel(model, devices, **RUNGS[rung])
    assert_same(train(model, fast), one_device())


def test_overlap_reduces_every_bucket_inside_backward():
    model = net(on=[0, 1])
    fast = FastDataParallel(model, [0, 1], bucket_mb=0.0005)
    train(model, fast)
    assert len(fast.buckets.buckets) >= 2
    assert fast.buckets.launched_in_backward == 3 * len(fast.buckets.buckets)
    kept = FastDataParallel(net(on=[0, 1]), [0, 1], overlap_reduce=False)
    train(kept.module, kept)
    assert kept.buckets.launched_in_backward == 0 and len(kept.buckets.buckets) == 1


def test_buckets_are_ddps_within_each_dtype():
    module = nn.Module()
    sizes = [5, 30, 5, 1, 1, 8]  # elements; p2 and p4 are float32, the rest float64
    for i, size in enumerate(sizes):
        dtype = torch.float32 if i in (2, 4) else torch.float64
        module.register_parameter(f"p{i}", nn.Parameter(torch.zeros(size, dtype=dtype)))
    cap = 100  # bytes
    fast = FastDataParallel(module.to(source([0, 1])), [0, 1], bucket_mb=cap / 2**20)
    got = [b.positions for b in fast.buckets.buckets]
    # float64: 64 + 8 bytes, then 240 alone (over the cap beside them), then 40; float32: 4 + 20.
    assert got == plan_buckets(list(module.parameters()), cap) == [[5, 3], [1], [4, 2], [0]]


def test_devices_are_checked_like_every_wrappers(monkeypatch):
    seen = []
    module = importlib.import_module(
        "learn_parallel.data_parallel"
    )  # the package's name is the function
    monkeypatch.setattr(module, "check_balance", lambda devices: seen.append(devices))
    FastDataParallel(net(on=[0, 1]), [0, 1])
    assert [str(d) for d in seen[0]] == ["sim:0", "sim:1"]
    # One device: the module is moved there, as DataParallel and TupleParallel do.
    model, reference = net(), net()
    assert_same(train(model, FastDataParallel(model, [1])), train(reference, reference))
    assert model[0].weight.device == source([1])


@pytest.mark.parametrize("rung", list(RUNGS))
def test_batchnorm_statistics_follow_replica_0_as_in_dataparallel(rung):
    a, b = net(batch_norm=True, on=[0, 1, 2]), net(batch_norm=True, on=[0, 1, 2])
    got = train(a, FastDataParallel(a, [0, 1, 2], **RUNGS[rung]))
    expected = train(b, lp.DataParallel(b, [0, 1, 2]))
    assert_same(got, expected)
    torch.testing.assert_close(a[1].running_mean, b[1].running_mean, **TOL)
    torch.testing.assert_close(a[1].running_var, b[1].running_var, **TOL)
    assert int(a[1].num_batches_tracked) == int(b[1].num_batches_tracked) == 3


def test_replicas_are_not_parameters_of_the_wrapper():
    model = net(on=[0, 1, 2])
    fast = FastDataParallel(model, [0, 1, 2])
    assert [id(p) for p in fast.parameters()] == [id(p) for p in model.parameters()]
    assert set(fast.state_dict()) == {f"module.{k}" for k in model.state_dict()}


def test_short_batch_uses_fewer_replicas_and_still_matches():
    data = [(x[:2], y[:2]) for x, y in batches()]
    model = net(on=[0, 1, 2, 3])
    reference = net()
    assert_same(
        train(model, FastDataParallel(model, [0, 1, 2, 3]), data), train(reference, reference, data)
    )


def test_two_backwards_accumulate_like_one_device():
    x, y = batches()[0]
    model, reference = net(on=[0, 1]), net()
    fast = FastDataParallel(model, [0, 1])
    for forward in (fast, reference):
        for _ in range(2):
            out = forward(x)
            nn.functional.cross_entropy(out, y.to(out.device)).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)


def test_frozen_parameter_gets_no_gradient_and_eval_runs():
    model = net(on=[0, 1])
    model[0].weight.requires_grad_(False)
    fast = FastDataParallel(model, [0, 1])
    x, y = batches()[0]
    nn.functional.cross_entropy(fast(x), y.to(source([0, 1]))).backward()
    assert model[0].weight.grad is None and model[2].weight.grad is not None
    fast.eval()
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x.to(source([0, 1]))), **TOL)


def test_cuda_graphs_refused_on_simulated_devices():
    with pytest.raises(ValueError, match="cuda_graphs=False"):
        FastDataParallel(net(on=[0, 1]), [0, 1], cuda_graphs=True)


def test_replaced_parameter_is_refused():
    model = net(on=[0, 1])
    fast = FastDataParallel(model, [0, 1])
    model[0].weight = nn.Parameter(model[0].weight.detach().clone())
    with pytest.raises(RuntimeError, match="Wrap the module again"):
        fast(batches()[0][0])


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_double_backward_is_refused():
    model = net(on=[0, 1])
    fast = FastDataParallel(model, [0, 1])
    loss = fast(batches()[0][0]).pow(2).sum()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.backward(loss, create_graph=True)


def test_buffer_that_requires_grad_is_refused():
    module = nn.Linear(2, 2).double().to(source([0, 1]))
    scale = torch.ones(1, dtype=torch.double, device=source([0, 1]), requires_grad=True)
    module.register_buffer("scale", scale)
    with pytest.raises(ValueError, match="buffer that requires grad"):
        FastDataParallel(module, [0, 1])


def test_tied_weights_stay_tied_in_the_replicas_and_train_like_one_device():
    def tied():
        torch.manual_seed(0)
        layer = nn.Linear(6, 6).double()
        return nn.Sequential(layer, nn.Tanh(), layer, nn.Linear(6, 3).double())

    model = tied().to(source([0, 1]))
    fast = FastDataParallel(model, [0, 1])
    for replica in fast.kept.replicas:
        assert replica[0] is replica[2]
    reference = tied()
    assert_same(train(model, fast), train(reference, reference))


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_a_backward_that_raised_leaves_no_state_behind():
    # The refused double backward raises inside backward, so the end-of-backward
    # callback never runs; the next steps must still train like one device.
    model = net(on=[0, 1])
    fast = FastDataParallel(model, [0, 1], bucket_mb=0.0005)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.backward(fast(batches()[0][0]).pow(2).sum(), create_graph=True)
    assert_same(train(model, fast), one_device())


class FakeCuda:
    """Just enough of torch.cuda's current device and streams to watch a capture fail on the CPU.

    A stream is ``(name, device index)``; every device starts on its default stream.
    """

    def __init__(self, count):
        self.device = 0
        self.current = {i: ("default", i) for i in range(count)}
        self.captures = []

    def patch(self, mp, fail_on):
        mp.setattr(torch.cuda, "current_device", lambda: self.device)
        mp.setattr(torch.cuda, "set_device", self.set_device)
        mp.setattr(torch.cuda, "current_stream", lambda i=None: self.current[i])
        mp.setattr(torch.cuda, "set_stream", self.set_stream)
        mp.setattr(torch.cuda, "synchronize", lambda i=None: None)
        mp.setattr(torch.cuda, "Stream", lambda i: ("capture", i))
        mp.setattr(torch.cuda, "device", self.device_context)
        mp.setattr(torch.cuda.graph, "default_capture_stream", ("class-wide", 0))
        mp.setattr(torch.cuda, "make_graphed_callables", self.capturer(fail_on))

    def set_device(self, index):
        self.device = index

    def set_stream(self, stream):  # as torch.cuda.set_stream: the stream's device becomes current
        self.current[stream[1]] = stream
        self.device = stream[1]

    @contextlib.contextmanager
    def device_context(self, index):
        previous, self.device = self.device, index
        yield
        self.device = previous

    def capturer(self, fail_on):
        def make_graphed_callables(module, sample, allow_unused_input=False):
            stream = torch.cuda.graph.default_capture_stream
            self.captures.append((threading.current_thread(), self.device, stream))
            module.forward = lambda *args: pytest.fail("a graphed forward ran")
            if self.device == fail_on:
                # What torch.cuda.graph does when ending the capture raises: its
                # capture stream stays current.
                self.set_stream(stream)
                raise RuntimeError(
                    "CUDA error: operation failed due to a previous error during capture"
                )
            return module

        return make_graphed_callables


def test_a_failed_capture_restores_streams_and_refuses_with_the_cause():
    model = net(on=[0, 1])
    fast = FastDataParallel(model, [0, 1])
    # Simulated devices refuse cuda_graphs=True at construction; the fake CUDA stands in.
    fast.graphs = ReplicaGraphs(fast.kept, fast.devices)
    fake = FakeCuda(2)
    x = batches()[0][0]
    with pytest.MonkeyPatch.context() as mp:
        fake.patch(mp, fail_on=1)
        with pytest.raises(RuntimeError, match="previous error during capture"):
            fast(x)
        # One replica at a time, from the calling thread, each on its own device's stream.
        assert fake.captures == [
            (threading.current_thread(), 0, ("capture", 0)),
            (threading.current_thread(), 1, ("capture", 1)),
        ]
        assert fake.current == {0: ("default", 0), 1: ("default", 1)}
        assert fake.device == 0
        assert torch.cuda.graph.default_capture_stream == ("class-wide", 0)
        with pytest.raises(RuntimeError, match="capturing the replicas' CUDA graphs failed"):
            fast(x)
    # The eager forwards are back: evaluation still runs, and matches one device.
    assert all("forward" not in replica.__dict__ for replica in fast.kept.replicas)
    fast.eval()
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x.to(source([0, 1]))), **TOL)
