"""ReplicatedStep's rungs on simulated devices, in float64, against one-device training.

The reference is one device run with DDP's semantics: the batch split into one
piece per device, each piece through the model (BatchNorm normalising per piece,
as on each replica), the loss averaged over the pieces (or, with gathered outputs,
one loss over the whole batch), and the buffers that replica 0's piece left behind
(DDP broadcasts rank 0's buffers before every forward). Every rung must match it,
step by step: losses, then weights and buffers after three SGD steps with momentum
(tolerance as in test_equivalence.py); and every replica must hold bit-identical
weights, as DDP's ranks do. CUDA graphs are tested in tests/gpu/test_gpu_replicated.py.
"""

import contextlib
import gc
import importlib
import sys
import warnings
import weakref
from pathlib import Path

import pytest
import torch
from _training import TOL, train_like_ddp
from torch import nn

from learn_parallel.devices import resolve_devices
from learn_parallel.ladder import ReplicatedStep
from learn_parallel.ladder import graphs as graphs_module
from learn_parallel.ladder.graphs import StepGraphs
from learn_parallel.variants import split_batch

RUNGS = {
    "own_optimizers": {"overlap": False, "per_device_inputs": False},
    "overlap_all_reduce": {"overlap": True, "per_device_inputs": False},
    "per_device_inputs": {"overlap": True, "per_device_inputs": True},
}
LR, MOMENTUM, STEPS = 0.1, 0.9, 3
loss_fn = nn.functional.cross_entropy


def sgd(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def net(batch_norm=True):
    torch.manual_seed(0)
    norm = [nn.BatchNorm1d(16)] if batch_norm else []
    return nn.Sequential(nn.Linear(6, 16), *norm, nn.ReLU(), nn.Linear(16, 3)).double()


def batches(n=12):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(n, 6, generator=g, dtype=torch.double), torch.randint(0, 3, (n,), generator=g))
        for _ in range(STEPS)
    ]


def one_device(count, gathered, batch_norm=True):
    model = net(batch_norm)
    return model, train_like_ddp(
        model, batches(), count, loss_fn, sgd(model.parameters()), gathered
    )


def replicated(devices, batch_norm=True, **switches):
    model = net(batch_norm).to(resolve_devices(devices)[0].torch_device)
    step = ReplicatedStep(model, sgd, loss_fn, devices, bucket_mb=0.0005, **switches)
    losses = []
    for x, y in batches():
        if switches.get("per_device_inputs", True):
            per_device = step(split_batch((x, y), len(devices)))
            losses.append(sum(loss.cpu() for loss in per_device) / len(devices))
        else:
            losses.append(step((x, y)).cpu())
    return step, model, losses


def assert_like_one_device(step, model, losses, reference, reference_losses):
    for got, expected in zip(losses, reference_losses, strict=True):
        torch.testing.assert_close(got, expected, **TOL)
    expected_state = reference.state_dict()
    for name, tensor in model.state_dict().items():  # weights and BatchNorm buffers
        torch.testing.assert_close(tensor.cpu(), expected_state[name], **TOL, msg=name)
    for replica in step.replicas[1:]:  # DDP's ranks stay bit-identical: so do the replicas
        for mine, first in zip(replica.parameters(), model.parameters(), strict=True):
            assert torch.equal(mine.cpu(), first.cpu())


@pytest.mark.parametrize("rung", list(RUNGS))
@pytest.mark.parametrize("devices", [[0, 1], [0, 1, 2, 3], [2, 0, 3]])
def test_rung_trains_like_one_device_with_ddps_buffers(rung, devices):
    step, model, losses = replicated(devices, **RUNGS[rung])
    gathered = not RUNGS[rung]["per_device_inputs"]
    assert_like_one_device(step, model, losses, *one_device(len(devices), gathered))


def test_without_batchnorm_it_is_plain_one_device_training():
    step, model, losses = replicated([0, 1, 2], batch_norm=False)
    reference = net(batch_norm=False)
    optimizer = sgd(reference.parameters())
    expected = []
    for x, y in batches():
        optimizer.zero_grad()
        loss = loss_fn(reference(x), y)
        loss.backward()
        optimizer.step()
        expected.append(loss.detach())
    assert_like_one_device(step, model, losses, reference, expected)


def test_every_replica_starts_each_forward_from_replica_0s_buffers():
    seen = {True: [], False: []}
    for broadcast in (True, False):
        step, _, _ = replicated([0, 1, 2], broadcast_buffers=broadcast)
        for replica in step.replicas:
            replica[1].register_forward_pre_hook(
                lambda m, _, on=seen[broadcast]: on.append(m.running_mean.cpu().clone())
            )
        for x, y in batches():
            step(split_batch((x, y), 3))
    # Three replicas per step, in any order: with the broadcast the three agree every time.
    for step_seen in zip(*[iter(seen[True])] * 3):
        assert all(torch.equal(s, step_seen[0]) for s in step_seen)
    # Without it each replica keeps its own statistics: they drift apart.
    assert not all(torch.equal(s, seen[False][-3]) for s in seen[False][-3:])


def test_buckets_are_all_reduced_inside_backward_only_with_overlap():
    step, _, _ = replicated([0, 1], overlap=True)
    assert len(step.buckets.buckets) >= 2
    assert step.buckets.launched_in_backward == STEPS * len(step.buckets.buckets)
    step, _, _ = replicated([0, 1], overlap=False)
    assert len(step.buckets.buckets) == 1 and step.buckets.launched_in_backward == 0


def test_replicas_own_their_weights_optimizers_and_gradient_buckets():
    step, model, _ = replicated([0, 1, 2])
    assert step.replicas[0] is model
    for replica, optimizer, device in zip(step.replicas, step.optimizers, step.devices):
        params = list(replica.parameters())
        assert all(p.device == device.torch_device for p in params)
        momentum = [optimizer.state[p]["momentum_buffer"] for p in params]
        assert all(m.device == device.torch_device for m in momentum)
    # Every .grad is still a view of its bucket's flat tensor: autograd accumulated in place.
    for bucket in step.buckets.buckets:
        for flats, replica in zip(step._grads[id(bucket)], step.replicas):
            params = [p for p in replica.parameters() if p.requires_grad]
            for i in bucket.positions:
                assert params[i].grad.untyped_storage().data_ptr() == flats.data_ptr()


def test_per_device_inputs_scatter_and_gather_nothing(monkeypatch):
    module = importlib.import_module("learn_parallel.ladder.replicated")

    def refuse(*args, **kwargs):
        raise AssertionError("per_device_inputs=True went through device 0")

    monkeypatch.setattr(module, "scatter_kwargs", refuse)
    monkeypatch.setattr(module, "gather", refuse)
    step, model, losses = replicated([0, 1], per_device_inputs=True)
    assert_like_one_device(step, model, losses, *one_device(2, gathered=False))


def test_frozen_parameter_stays_and_an_unused_one_is_refused():
    model = net().to(resolve_devices([0, 1])[0].torch_device)
    model[0].weight.requires_grad_(False)
    before = model[0].weight.detach().clone()
    step = ReplicatedStep(model, sgd, loss_fn, [0, 1])
    step(split_batch(batches()[0], 2))
    assert torch.equal(model[0].weight, before) and model[0].weight.grad is None

    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(6, 3).double(), nn.Linear(6, 3).double()

        def forward(self, x):
            return self.used(x)

    step = ReplicatedStep(Unused().to(model[0].weight.device), sgd, loss_fn, [0, 1])
    with pytest.raises(RuntimeError, match="got no gradient in this backward"):
        step(split_batch(batches()[0], 2))


def test_bad_input_is_refused_with_the_fix():
    on = resolve_devices([0, 1])[0].torch_device
    step = ReplicatedStep(net().to(on), sgd, loss_fn, [0, 1])
    with pytest.raises(ValueError, match=r"piece per device, 2 in all, but got 2 items \(Tensor"):
        step(batches()[0])
    with pytest.raises(ValueError, match="which need CUDA GPUs; these devices are simulated"):
        ReplicatedStep(net().to(on), sgd, loss_fn, [0, 1], cuda_graphs=True)
    model = net().to(on)
    with pytest.raises(ValueError, match="over the parameters it is given"):
        ReplicatedStep(model, lambda _: sgd(model.parameters()), loss_fn, [0, 1])
    frozen = net().to(on).requires_grad_(False)
    with pytest.raises(ValueError, match="nothing to train"):
        ReplicatedStep(frozen, sgd, loss_fn, [0, 1])


def test_a_model_that_outlives_its_step_keeps_no_replica_alive():
    step, model, _ = replicated([0, 1])
    replica = weakref.ref(step.replicas[1])
    del step
    gc.collect()
    assert replica() is None
    model(torch.randn(4, 6, dtype=torch.double, device=model[0].weight.device)).sum().backward()


class FakeCapture:
    """Just enough of torch.cuda to run StepGraphs on the CPU: streams log their waits, and a
    graph captures the callables run inside ``torch.cuda.graph`` (instead of running them),
    to run them again on each replay."""

    def __init__(self, mp, log):
        self.log, self.capturing = log, None
        fake = self

        class Stream:
            def __init__(self, name):
                self.name = name

            def wait_stream(self, other):
                log.append(f"{self.name} waits {other.name}")

        class Graph:
            def __init__(self):
                self.work = []

            def pool(self):
                return None

            def replay(self):
                for work in self.work:
                    work()

        @contextlib.contextmanager
        def graph(g, pool=None, stream=None, capture_error_mode="global"):
            log.append(f"capture ({capture_error_mode})")
            fake.capturing = g
            try:
                yield
            finally:
                fake.capturing = None

        mp.setattr(torch.cuda, "Stream", lambda i: Stream(f"own{i}"))
        mp.setattr(torch.cuda, "current_stream", lambda i=None: Stream(f"caller{i}"))
        mp.setattr(torch.cuda, "current_device", lambda: 0)
        for name in ("set_stream", "set_device", "synchronize"):
            mp.setattr(torch.cuda, name, lambda *args: None)
        mp.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        mp.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
        mp.setattr(torch.cuda, "CUDAGraph", Graph)
        mp.setattr(torch.cuda, "graph", graph)

    def run(self, what, work):
        """Run ``work`` now, or, while a graph is captured, record it in that graph."""
        if self.capturing is None:
            self.log.append(what)
            return work()
        self.capturing.work.append(lambda: (self.log.append(f"replay {what}"), work()))
        return work()  # a capture gives back the graph's own output tensor


@pytest.mark.parametrize("refuse", [False, True])
def test_step_graphs_warm_up_capture_one_device_at_a_time_then_replay(refuse):
    log = []
    devices = resolve_devices([0, 1])
    pieces = [(torch.full((2,), float(k)), torch.zeros(2)) for k in range(2)]
    with pytest.MonkeyPatch.context() as mp:
        fake = FakeCapture(mp, log)

        def backward(k, piece):
            if refuse and k == 1 and fake.capturing is not None:
                raise RuntimeError("operation not permitted when stream is capturing")
            return fake.run(f"backward {k}", lambda: piece[0].sum())

        def optimizer(k):
            fake.run(f"optimizer {k}", lambda: None)

        graphs = StepGraphs(devices, lambda p: log.append("eager") or (), backward, optimizer)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(5):
                log.append("step")
                graphs(pieces, lambda: log.append("between"), lambda: log.append("buffers"))
            logged = list(log)
            if not refuse:
                shorter = [(x[:1], y[:1]) for x, y in pieces]
                with pytest.raises(ValueError, match="drop_last=True"):
                    graphs(shorter, lambda: None, lambda: None)
    steps = " | ".join(" ".join(logged).split("step ")[1:])
    waits = "own0 waits caller0 own1 waits caller1"
    back = "caller0 waits own0 caller1 waits own1"
    eager = f"{waits} eager {back}"
    if refuse:  # the first device's graphs were captured, the second refused: all eager
        # (the capture runs on the warm-up's streams, handed over like an eager step)
        capture = " ".join(["capture (thread_local)"] * 3)  # the second device's first refused
        expected = [f"{eager} "] * 3 + [f"{waits} {capture} {back} {eager} ", eager]
        assert steps.split(" | ") == expected
        (message,) = [str(w.message) for w in said]
        assert message.startswith("ReplicatedStep(cuda_graphs=True): capturing the step on sim:1")
        assert "(RuntimeError: operation not permitted" in message and "\n" not in message
        assert graphs.refused and not graphs.graphs
        return
    assert not said
    replay = (
        "replay backward 0 replay backward 1 between replay optimizer 0 replay optimizer 1 buffers"
    )
    # Warm-up and capture on streams of its own; then replays on the caller's streams, with
    # no hand-off, the buffers synced once before the first (the eager steps left each
    # replica its own statistics).
    assert steps.split(" | ")[:3] == [f"{eager} "] * 3
    # Both graphs of each device captured in CUDA's thread-local mode (graphs.THREAD_LOCAL).
    capture = " ".join(["capture (thread_local)"] * 4)
    assert steps.split(" | ")[3:] == [f"{waits} {capture} {back} buffers {replay} ", replay]


def test_what_the_graphs_hold_trains_like_one_device_in_the_replay_order():
    # A replay runs exactly these parts, in this order; here they run eagerly on the CPU.
    model = net().to(resolve_devices([0, 1, 2])[0].torch_device)
    step = ReplicatedStep(model, sgd, loss_fn, [0, 1, 2], bucket_mb=0.0005)
    losses = []
    step._sync_buffers()  # before the first replay
    for x, y in batches():
        pieces = [
            tuple(t.to(d.torch_device) for t in piece)
            for piece, d in zip(split_batch((x, y), 3), step.devices)
        ]
        per_device = [step._device_backward(k, piece) for k, piece in enumerate(pieces)]
        step._all_reduce_rest()
        for k in range(3):
            step._optimizer_step(k)
        step._sync_buffers()  # at the end of every replay: what the next forward must read
        losses.append(sum(loss.detach().cpu() for loss in per_device) / 3)
    assert_like_one_device(step, model, losses, *one_device(3, gathered=False))


def _calls_out_of(module_file: str, run) -> list[str]:
    """Every call that code in ``module_file`` makes into torch (or into this file's fakes of
    torch.cuda) while ``run()`` runs: what one step costs the host, call by call."""
    here, torch_dir = __file__, str(Path(torch.__file__).parent)
    made = []

    def profile(frame, event, arg):
        if event == "c_call" and frame.f_code.co_filename == module_file:
            owner, _, name = arg.__qualname__.rpartition(".")
            if "Tensor" in owner:  # a method of a tensor, of whatever tensor class
                made.append(f"tensor.{name}")
            elif (getattr(arg, "__module__", None) or "").startswith("torch"):
                made.append(arg.__qualname__)
        elif event == "call" and frame.f_back and frame.f_back.f_code.co_filename == module_file:
            callee = frame.f_code.co_filename
            if callee.startswith(torch_dir) or callee == here:
                made.append(".".join(frame.f_code.co_qualname.split(".")[-2:]))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return made


def test_a_replay_makes_only_the_calls_the_gpus_need():
    # Per device: its two graphs' replays; then the two collectives' callbacks; copies only
    # for inputs that are not the tensors the graphs were captured with.
    devices = resolve_devices([0, 1, 2])
    pieces = [(torch.full((2,), float(k)), torch.zeros(2)) for k in range(3)]
    with pytest.MonkeyPatch.context() as mp:
        fake = FakeCapture(mp, [])
        backward = lambda k, piece: fake.run(f"backward {k}", lambda: piece[0].sum())  # noqa: E731
        graphs = StepGraphs(devices, lambda p: (), backward, lambda k: None, warmup=0)
        graphs(pieces, lambda: None, lambda: None)  # captures, then replays
        captured, nothing = graphs.inputs, dict  # a C callable: no call of this file's
        same = _calls_out_of(graphs_module.__file__, lambda: graphs(captured, nothing, nothing))
        other = _calls_out_of(graphs_module.__file__, lambda: graphs(pieces, nothing, nothing))
    replays = ["Graph.replay"] * 6
    assert sorted(same) == sorted(replays), same
    assert sorted(other) == sorted(replays + ["tensor.copy_"] * 6), other
