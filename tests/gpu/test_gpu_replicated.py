"""ReplicatedStep's rungs on two GPUs, and the ladder's DDP rows (``pytest -m gpu``).

Each rung trains a float64 conv net with BatchNorm for six SGD steps on ``cuda:0`` and
``cuda:1`` and must match one-GPU training with DDP's semantics (`train_like_ddp`):
losses step by step, then weights and BatchNorm buffers. With ``cuda_graphs`` the
first three steps run eagerly, the fourth captures the graphs and the rest replay
them; a model that cannot be captured falls back with one warning line and still
trains like one GPU. The in-process all-reduce is NCCL's here and equals the ring.
"""

import json

import pytest
import torch
from _training import conv_net, train_like_ddp
from torch import nn

from experiments import ladder as record_ladder
from learn_parallel.ladder import ReplicatedStep
from learn_parallel.ladder.collectives import all_reduce_across, ring_across
from learn_parallel.variants import split_batch

pytestmark = pytest.mark.gpu
TOL = {"rtol": 1e-9, "atol": 1e-11}  # float64; reduction order differs from one GPU
STEPS = 6
RUNGS = {
    "own_optimizers": {"overlap": False, "per_device_inputs": False},
    "all_reduce_in_backward": {"overlap": True, "per_device_inputs": False},
    "per_device_inputs": {"overlap": True, "per_device_inputs": True},
    "step_graphs": {"overlap": True, "per_device_inputs": True, "cuda_graphs": True},
}
loss_fn = nn.functional.cross_entropy


def with_batch_norm():
    return conv_net(batch_norm=True)


class RefusesCapture(nn.Module):
    """The conv net, refusing to run while a CUDA graph is captured (a Python error inside
    the capture, which ends it cleanly: a failed CUDA call there, a host sync say, can leave
    cuda:0's random number generator in capture mode for the tests after this one)."""

    def __init__(self):
        super().__init__()
        self.net = conv_net(batch_norm=True)

    def forward(self, x):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("this module cannot be captured")
        return self.net(x)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def batches():
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(8, 3, 8, 8, generator=g, dtype=torch.double),
            torch.randint(0, 3, (8,), generator=g),
        )
        for _ in range(STEPS)
    ]


def one_gpu(make, gathered):
    model = make().to("cuda:0")
    data = [(x.to("cuda:0"), y.to("cuda:0")) for x, y in batches()]
    losses = train_like_ddp(model, data, 2, loss_fn, sgd(model.parameters()), gathered)
    return model, losses


def two_gpus(make, **switches):
    model = make().to("cuda:0")
    step = ReplicatedStep(model, sgd, loss_fn, [0, 1], bucket_mb=0.001, **switches)
    losses = []
    for x, y in batches():
        if switches.get("per_device_inputs", True):
            pieces = step(split_batch((x, y), 2))  # host pieces: each copied to its GPU
            losses.append(sum(loss.cpu() for loss in pieces) / 2)
        else:
            losses.append(step((x.to("cuda:0"), y)).cpu())
    torch.cuda.synchronize()
    return step, model, losses


def assert_like_one_gpu(model, losses, reference, reference_losses):
    for got, expected in zip(losses, reference_losses, strict=True):
        torch.testing.assert_close(got, expected.cpu(), **TOL)
    expected = reference.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor.cpu(), expected[name].cpu(), **TOL, msg=name)


@pytest.mark.parametrize("rung", list(RUNGS))
def test_every_rung_matches_one_gpu_with_ddps_buffers(rung):
    step, model, losses = two_gpus(with_batch_norm, **RUNGS[rung])
    gathered = not RUNGS[rung]["per_device_inputs"]
    assert_like_one_gpu(model, losses, *one_gpu(with_batch_norm, gathered))
    for mine, first in zip(step.replicas[1].parameters(), model.parameters(), strict=True):
        assert torch.equal(mine.cpu(), first.cpu())  # NCCL gives both GPUs the same sums
    if rung == "step_graphs":
        assert step.graphs.refused is None and len(step.graphs.graphs) == 2
    if rung == "all_reduce_in_backward":
        assert step.buckets.launched_in_backward == STEPS * len(step.buckets.buckets) > STEPS


def test_a_refused_capture_says_why_in_one_line_and_trains_eagerly():
    refused = r"capturing the step on cuda:0 was refused \(RuntimeError: this module cannot"
    with pytest.warns(RuntimeWarning, match=refused) as said:
        step, model, losses = two_gpus(RefusesCapture, cuda_graphs=True)
    (message,) = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
    assert "\n" not in message and "every step runs eagerly from now on" in message
    assert step.graphs.refused is not None and not step.graphs.graphs
    assert_like_one_gpu(model, losses, *one_gpu(RefusesCapture, gathered=False))


def test_graphs_refuse_a_new_input_shape():
    step, _, _ = two_gpus(with_batch_norm, cuda_graphs=True)
    # Backward is replayed whole, so its all-reduces wait for its end: one bucket per dtype.
    assert len(step.buckets.buckets) == len({p.dtype for p in step.replicas[0].parameters()})
    x, y = batches()[0]
    with pytest.raises(ValueError, match="drop_last=True"):
        step(split_batch((x[:6], y[:6]), 2))


def test_nccl_all_reduce_across_gpus_equals_the_ring():
    g = torch.Generator().manual_seed(0)
    values = [torch.randn(1001, generator=g, dtype=torch.double) for _ in range(2)]
    nccl = [v.to(f"cuda:{i}") for i, v in enumerate(values)]
    ring = [v.to(f"cuda:{i}") for i, v in enumerate(values)]
    all_reduce_across(nccl)
    ring_across(ring)
    torch.cuda.synchronize()
    for a, b in zip(nccl, ring):
        torch.testing.assert_close(a.cpu(), values[0] + values[1], rtol=0, atol=1e-12)
        torch.testing.assert_close(b.cpu(), values[0] + values[1], rtol=0, atol=1e-12)
    assert torch.equal(nccl[0].cpu(), nccl[1].cpu()) and torch.equal(ring[0].cpu(), ring[1].cpu())


def test_ladder_ddp_rows_on_gpus_and_ddp_in_a_graph_or_why_not(tmp_path):
    argv = ["--out", str(tmp_path), "--quick", "--repeats", "1", "--steps", "3"]
    assert record_ladder.main([*argv, "--workloads", "mlp"]) == 0
    rows = {r["rung"]: r for r in json.loads((tmp_path / "ladder.json").read_text())["rows"]}
    assert rows["ddp"]["status"] == "ok", rows["ddp"]["note"]
    assert rows["step_graphs"]["status"] == "ok" and not rows["step_graphs"]["note"]
    graphs = rows["ddp_graphs"]
    refused = "RuntimeError: CUDA graph capture of the DDP step was refused:"
    assert graphs["status"] == "ok" or graphs["note"].startswith(refused), graphs["note"]
    print(f"DDP in a CUDA graph: {graphs['status']} {graphs['note']}")
