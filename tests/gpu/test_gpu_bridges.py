"""The bridges on real GPUs: libtorch's replicate strategy and every rung of the ladder.

Each rung trains a float64 conv net for three SGD steps on two GPUs and must
match one-device training (outputs, gradients, weights); BatchNorm statistics
are compared between strategies. Run with ``pytest -m gpu`` on a 2-GPU machine.
"""

import copy
import json
import signal
import threading

import _training
import pytest
import torch
from _training import assert_same, conv_net
from torch import nn

import learn_parallel as lp
from experiments import ladder as record_ladder
from learn_parallel.lab.ladder_rungs import (
    MEASURED,
    TorchReplicateDataParallel,
    TorchWithOurWorkers,
)
from learn_parallel.ladder.fast import FastDataParallel

pytestmark = pytest.mark.gpu
TOL = {"rtol": 1e-9, "atol": 1e-11}  # float64; reduction order differs from one device


def assert_default_streams():
    """Every device on its default stream: nothing left a capture or side stream current."""
    for i in range(2):
        current, default = torch.cuda.current_stream(i), torch.cuda.default_stream(i)
        assert current == default, f"cuda:{i} is left on {current}, not its default stream"


@pytest.fixture(autouse=True)
def _time_limit_and_clean_streams():
    """Fail a test that hangs (say, waiting on a worker) instead of stalling the whole run,
    and one that leaves another stream current for the tests after it."""

    def stop(signum, frame):
        raise TimeoutError("test_gpu_bridges: a test ran for more than 120 s")

    assert_default_streams()
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    assert_default_streams()


def randn(*shape):
    """Random inputs made on the host: the tests do not depend on CUDA's generator state."""
    return torch.randn(*shape, dtype=torch.double).to("cuda:0")


def batches(n=8, steps=3):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(n, 3, 8, 8, generator=g, dtype=torch.double),
            torch.randint(0, 3, (n,), generator=g),
        )
        for _ in range(steps)
    ]


def train(model, forward):
    def run(batch):
        x, y = batch
        out = forward(x.to("cuda:0"))
        return out, nn.functional.cross_entropy(out, y.to("cuda:0"))

    result = _training.train(model, run, batches(), lr=0.05)
    torch.cuda.synchronize()
    return result


def single_device():
    model = conv_net().to("cuda:0")
    return train(model, model)


WRAPPERS = {
    "clone": lambda m: lp.CloneDataParallel(m, device_ids=[0, 1]),
    "persistent_workers": lambda m: TorchWithOurWorkers(m, device_ids=[0, 1]),
    "our_forward": lambda m: TorchReplicateDataParallel(m, device_ids=[0, 1]),
    "lean_replicate": lambda m: lp.DataParallel(m, device_ids=[0, 1]),
    "kept_replicas": lambda m: FastDataParallel(m, [0, 1], overlap_reduce=False),
    "overlap_reduce": lambda m: FastDataParallel(m, [0, 1], bucket_mb=0.001),
    "cuda_graphs": lambda m: FastDataParallel(m, [0, 1], bucket_mb=0.001, cuda_graphs=True),
}


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_every_strategy_and_rung_matches_one_gpu(name):
    model = conv_net().to("cuda:0")
    wrapped = WRAPPERS[name](model)
    assert_same(train(model, wrapped), single_device(), tol=TOL)


def test_overlap_reduces_buckets_inside_backward():
    model = conv_net().to("cuda:0")
    fast = FastDataParallel(model, [0, 1], bucket_mb=0.001)
    train(model, fast)
    assert len(fast.buckets.buckets) > 1
    assert fast.buckets.launched_in_backward == 3 * len(fast.buckets.buckets)


def test_clone_leaves_batchnorm_statistics_alone_broadcast_keeps_replica_0s():
    x = batches()[0][0].to("cuda:0")
    stats = {}
    for strategy, wrapper in (("broadcast", lp.DataParallel), ("clone", lp.CloneDataParallel)):
        model = conv_net(batch_norm=True).to("cuda:0")
        wrapper(model, device_ids=[0, 1])(x)
        stats[strategy] = model[1].running_mean.cpu()
    reference = conv_net(batch_norm=True).to("cuda:0")
    reference(x[:4])  # replica 0's share of the batch
    torch.testing.assert_close(stats["broadcast"], reference[1].running_mean.cpu(), **TOL)
    assert torch.equal(stats["clone"], torch.zeros(8, dtype=torch.double))


@pytest.mark.parametrize("graphs", [False, True])
def test_fast_path_keeps_batchnorm_statistics_like_dataparallel(graphs):
    results = []
    for make in (
        lambda m: lp.DataParallel(m, device_ids=[0, 1]),
        lambda m: FastDataParallel(m, [0, 1], cuda_graphs=graphs),
    ):
        model = conv_net(batch_norm=True).to("cuda:0")
        record = train(model, make(model))
        results.append((record, model[1].running_mean.cpu(), model[1].running_var.cpu()))
    assert_same(results[1][0], results[0][0], tol=TOL)
    torch.testing.assert_close(results[1][1], results[0][1], **TOL)
    torch.testing.assert_close(results[1][2], results[0][2], **TOL)


def test_cuda_graphs_refuse_a_new_input_shape():
    model = conv_net().to("cuda:0")
    fast = FastDataParallel(model, [0, 1], cuda_graphs=True)
    fast(randn(8, 3, 8, 8)).sum().backward()
    with pytest.raises(ValueError, match="drop_last=True"):
        fast(randn(6, 3, 8, 8))


def test_cuda_graphs_leave_the_callers_input_alone():
    model = conv_net().to("cuda:0")
    fast = FastDataParallel(model, [0, 1], cuda_graphs=True)
    first = randn(8, 3, 8, 8)
    kept = first.clone()
    fast(first).sum().backward()
    fast(randn(8, 3, 8, 8)).sum().backward()
    torch.cuda.synchronize()
    assert torch.equal(first, kept)


def test_clone_double_backward_on_gpus():
    model = conv_net().to("cuda:0")
    x = batches()[0][0].to("cuda:0")
    dp = lp.CloneDataParallel(model, device_ids=[0, 1])
    grads = torch.autograd.grad(dp(x).pow(2).sum(), list(model.parameters()), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    second = torch.autograd.grad(penalty, list(model.parameters()))
    single = conv_net().to("cuda:0")
    grads_1 = torch.autograd.grad(
        single(x).pow(2).sum(), list(single.parameters()), create_graph=True
    )
    second_1 = torch.autograd.grad(sum(g.pow(2).sum() for g in grads_1), list(single.parameters()))
    for a, b in zip(second, second_1, strict=True):
        torch.testing.assert_close(a, b, **TOL)


def test_ladder_quick_run_on_gpus(tmp_path):
    argv = ["--out", str(tmp_path), "--quick", "--no-ddp", "--steps", "3", "--repeats", "2"]
    assert record_ladder.main(argv) == 0
    report = json.loads((tmp_path / "ladder.json").read_text())
    failed = [(r["rung"], r["workload"], r["note"]) for r in report["rows"] if r["status"] != "ok"]
    assert not failed, failed
    refused = [(r["rung"], r["note"]) for r in report["rows"] if r["note"]]
    assert not refused, refused  # a refused capture would have run eagerly under its name
    # every rung, and the one-thread reference measured beside them
    assert {r["rung"] for r in report["rows"]} == {r.name for r in MEASURED}


def test_copy_of_model_is_untouched_by_clone():
    # The clones are copies: training through them changes only the original.
    model = conv_net().to("cuda:0")
    before = copy.deepcopy(model)
    replicas = lp.CloneDataParallel(model, device_ids=[0, 1]).replicate(model, [0, 1])
    assert replicas[1][0].weight.device == torch.device("cuda:1")
    for a, b in zip(model.parameters(), before.parameters(), strict=True):
        assert torch.equal(a, b)


def test_cuda_graphs_captured_in_training_run_eval_eagerly():
    model = conv_net(batch_norm=True).to("cuda:0")
    fast = FastDataParallel(model, [0, 1], cuda_graphs=True)
    x = batches()[0][0].to("cuda:0")
    fast(x).sum().backward()  # captures the graphs, in training mode
    fast.eval()
    with torch.no_grad():
        torch.testing.assert_close(fast(x).cpu(), model(x).cpu(), **TOL)


@pytest.mark.parametrize("name", ["overlap_reduce", "cuda_graphs"])
def test_fast_path_on_the_callers_own_streams(name):
    # Forward and backward on a non-default stream of each device: the workers adopt
    # the caller's streams and the bucketed reduce orders itself after them.
    model = conv_net().to("cuda:0")
    wrapped = WRAPPERS[name](model)
    streams = [torch.cuda.Stream(0), torch.cuda.Stream(1)]
    with torch.cuda.stream(streams[0]), torch.cuda.stream(streams[1]):
        got = train(model, wrapped)
    assert_same(got, single_device(), tol=TOL)


@pytest.mark.parametrize("name", ["overlap_reduce", "cuda_graphs"])
def test_fast_path_from_another_thread(name):
    # A new thread starts on the default streams, as the main one does.
    model = conv_net().to("cuda:0")
    wrapped = WRAPPERS[name](model)
    result = {}

    def run():
        try:
            result["got"] = train(model, wrapped)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread below
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(100)
    assert not thread.is_alive(), "training in another thread did not finish in 100 s"
    if "error" in result:
        raise result["error"]
    assert_same(result["got"], single_device(), tol=TOL)
