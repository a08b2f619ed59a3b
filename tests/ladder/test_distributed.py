"""learn_parallel.DistributedDataParallel trains exactly like one process (gloo, CPU, float64).

Each world size starts its processes once (`run_ranks`, gloo over 127.0.0.1) and
runs every check in them (`suite_worker`); the tests compare what the ranks
returned with `reference_training`, the same training in this one process.

Equal means within 1e-12 (float64): the only difference allowed is the
order in which the all-reduce adds the ranks' contributions.

"Uneven" shares: each rank's loss is the mean over its own rows and DDP
averages the ranks' gradients, so the result is the gradient of the mean of
the per-rank mean losses, not of the global mean (the tests check both facts).
"""

from __future__ import annotations

import re
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from learn_parallel import DistributedDataParallel
from learn_parallel.lab import ddp_checks
from learn_parallel.lab.ddp_checks import reference_training, step_batches, tiny_model
from learn_parallel.lab.processes import RankFailed, run_ranks

TOL = dict(rtol=0, atol=1e-12)
RUN = dict(timeout_s=150, group_timeout_s=60, threads=1)

EVEN = {2: [4, 4], 3: [4, 4, 4]}
UNEVEN = {2: [3, 5], 3: [2, 5, 3]}


def _tasks(world: int) -> list[tuple[str, dict]]:
    tasks = [
        ("train", {"rows": EVEN[world]}),
        ("train", {"rows": UNEVEN[world]}),
        ("ring", {"numel": 11}),
        ("ring", {"numel": world - 1}),  # fewer elements than ranks: an empty chunk
        ("no_sync", {}),
        ("errors", {}),
        ("buffers", {}),
        ("teardown", {}),  # last: it tears the group down
    ]
    return tasks


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def ranks(request):
    world = request.param
    results = run_ranks(ddp_checks.suite_worker, world, args=(_tasks(world),), **RUN)
    return world, results


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("task, shares", [(0, EVEN), (1, UNEVEN)], ids=["even", "uneven"])
def test_three_steps_match_one_process(ranks, task, shares):
    world, results = ranks
    reference = reference_training(shares[world], steps=3)
    for rank, result in enumerate(results):
        mine = result[f"train:{task}"]
        assert mine["buckets"] > 1, "the tiny bucket cap should make several buckets"
        for step in range(3):
            torch.testing.assert_close(
                mine["outputs"][step], reference["outputs"][step][rank], **TOL
            )
            _close(mine["grads"][step], reference["grads"][step])
            _close(mine["params"][step], reference["params"][step])


def test_uneven_shares_average_per_rank_means_not_the_global_mean(ranks):
    world, results = ranks
    global_mean = reference_training(UNEVEN[world], steps=1, per_rank_mean=False)
    grads = results[0]["train:1"]["grads"][0]
    differences = [(grads[n] - global_mean["grads"][0][n]).abs().max() for n in grads]
    assert max(differences) > 1e-4  # documented: not the gradient of the global mean


def test_ring_all_reduce_equals_dist_all_reduce(ranks):
    world, results = ranks
    for task in (2, 3):
        inputs = torch.stack([r[f"ring:{task}"]["input"] for r in results])
        for result in results:
            ring = result[f"ring:{task}"]
            torch.testing.assert_close(ring["ring"], ring["all_reduce"], **TOL)
            torch.testing.assert_close(ring["ring"], inputs.sum(0), **TOL)


def test_no_sync_accumulates_locally_then_equals_one_big_batch(ranks):
    world, results = ranks
    micro, rows = 3, 4
    big = reference_training([rows] * (world * micro), steps=1, per_rank_mean=False)
    shares = step_batches([rows] * (world * micro), 0)
    for rank, result in enumerate(results):
        mine = result["no_sync:4"]
        # Inside no_sync nothing is communicated: the gradient is this rank's own.
        model = tiny_model(0)
        x, y = shares[rank * micro]
        (F.mse_loss(model(x), y) / micro).backward()
        _close(mine["first_local_grads"], {n: p.grad for n, p in model.named_parameters()})
        _close(mine["grads"], big["grads"][0])
        _close(mine["params"], big["params"][0])


def test_refusals_name_the_problem_and_the_fix(ranks):
    _, results = ranks
    for result in results:
        messages = result["errors:5"]
        assert "got no gradient" in messages["unused"]
        assert "unused.weight" in messages["unused"] and "unused.bias" in messages["unused"]
        assert "requires_grad_(False)" in messages["unused"]
        assert "must be None for a module on the CPU" in messages["device_ids"]
        assert "no parameter that requires a gradient" in messages["frozen"]


def test_wrapping_broadcasts_buffers_even_where_torch_leaves_them_out(ranks):
    """Ours sends rank 0's buffers at wrap time whatever `broadcast_buffers` says; torch's
    `broadcast_buffers=False` keeps each rank's own, `forward_sync_buffers=False` does not.
    A torch without that keyword (2.11) leaves its case out instead of failing the ranks."""
    _, results = ranks
    for rank, result in enumerate(results):
        seen = result["buffers:6"]
        assert seen["ours"] == 0.0
        assert seen["torch broadcast_buffers=False"] == float(rank)
        if ddp_checks.FORWARD_SYNC_BUFFERS:
            assert seen["torch forward_sync_buffers=False"] == 0.0
        else:
            assert seen.keys() == {"ours", "torch broadcast_buffers=False"}


def test_the_forward_sync_buffers_case_follows_torchs_signature():
    """Torch 2.13 takes `forward_sync_buffers`; a signature without it turns the case off."""

    def older_init(self, module, device_ids=None, broadcast_buffers=True):
        pass

    assert not ddp_checks.takes_keyword(older_init, "forward_sync_buffers")
    assert ddp_checks.takes_keyword(older_init, "broadcast_buffers")
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if release >= (2, 13):
        assert ddp_checks.FORWARD_SYNC_BUFFERS


def test_a_peer_that_tears_its_group_down_ends_the_wait_long_before_the_timeout(ranks):
    """Only rank 0 uses the branch: the others raise, catch it and destroy their group, and
    gloo fails rank 0's pending all-reduce then, not at the group's timeout."""
    _, results = ranks
    first, *others = (result["teardown:7"] for result in results)
    assert re.search(r"Connection (closed|reset) by peer", first["error"]), first["error"]
    assert first["seconds"] < RUN["group_timeout_s"] / 4
    for other in others:
        assert (
            "got no gradient in this backward pass: branch.bias, branch.weight" in (other["error"])
        )


def test_without_a_process_group_the_error_says_what_to_call():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"needs a process group.*init_process_group"):
        DistributedDataParallel(nn.Linear(2, 2))


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_module_on_two_devices_is_refused(one_process_group):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    with pytest.raises(ValueError, match=r"one device per process.*cpu, meta.*Move the whole"):
        DistributedDataParallel(model)


def test_backward_without_sync_flag_reuses_buckets_every_step(one_process_group):
    """A second and third backward work too: the per-backward state is reset each time."""
    model = tiny_model(0)
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)
    reference = tiny_model(0)
    x = torch.randn(5, 8, dtype=torch.float64)
    for _ in range(3):
        ddp(x).sum().backward()
        reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL)


def test_a_bucket_holds_one_dtype_and_mixed_dtypes_train_as_one_process(one_process_group):
    """The planner is the ladder's: float32 and float64 gradients never share a flat tensor."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4).double(), nn.Linear(4, 2))  # float64, then float32
    model.forward = lambda x: model[1](model[0](x).float())
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)  # room for all: one bucket per dtype
    dtypes = [{ddp.params[i].dtype for i in b.positions} for b in ddp.buckets]
    assert dtypes == [{torch.float32}, {torch.float64}]  # the last layer's bucket first
    x = torch.randn(5, 8, dtype=torch.float64)
    ddp(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()  # the same model alone: world size 1 averages over one rank
    for grad, p in zip(grads, model.parameters()):
        torch.testing.assert_close(grad, p.grad, **TOL)


def _fails_on_rank_1(rank: int, world: int) -> None:
    if rank == 1:
        raise KeyError("rank 1 broke")
    dist.barrier()  # rank 0 waits here for a partner that never comes


def test_a_failing_rank_does_not_hang_the_others():
    start = time.monotonic()
    with pytest.raises(RankFailed, match=r"rank 1 failed(.|\n)*KeyError: 'rank 1 broke'"):
        run_ranks(_fails_on_rank_1, 2, timeout_s=60, group_timeout_s=30, threads=1)
    assert time.monotonic() - start < 45


def test_where_the_forward_ran_decides_whether_its_backward_all_reduces(one_process_group):
    """As in torch: `forward` fixes whether the backward after it synchronises, not no_sync's
    state when that backward runs."""
    ddp = DistributedDataParallel(tiny_model(0), bucket_cap_mb=0.001)
    launched = []
    launch = ddp._launch
    ddp._launch = lambda bucket: (launched.append(bucket.index), launch(bucket))
    x = torch.randn(5, 8, dtype=torch.float64)
    with ddp.no_sync():
        out = ddp(x)
    out.sum().backward()  # forward inside, backward outside: nothing is all-reduced
    assert launched == []
    out = ddp(x)
    with ddp.no_sync():
        out.sum().backward()  # forward outside, backward inside: every bucket is all-reduced
    assert sorted(launched) == sorted(b.index for b in ddp.buckets) and len(launched) > 1
