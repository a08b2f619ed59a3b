"""The same promises on real GPUs (run with `pytest -m gpu` on a multi-GPU machine)."""

import copy
import threading
import warnings

import pytest
import torch
from _training import conv_net
from torch import nn

import learn_parallel as lp

pytestmark = pytest.mark.gpu
TOL = {"rtol": 1e-10, "atol": 1e-12}  # float64, as in test_equivalence.py


def gpus(n):
    if torch.cuda.device_count() < n:
        pytest.skip(f"needs {n} GPUs")


def train(model, forward, batches, device):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    record = []
    for x, y in batches:
        optimizer.zero_grad()
        out = forward(x.to(device))
        loss = nn.functional.cross_entropy(out.to(device), y.to(device))
        loss.backward()
        record.append((out.detach().to("cpu"), [p.grad.to("cpu") for p in model.parameters()]))
        optimizer.step()
    return record, [p.detach().to("cpu") for p in model.parameters()]


def batches(n, steps=3):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(n, 3, 8, 8, generator=g, dtype=torch.double),
            torch.randint(0, 3, (n,), generator=g),
        )
        for _ in range(steps)
    ]


def assert_close_records(a, b):
    (ra, pa), (rb, pb) = a, b
    for (oa, ga), (ob, gb) in zip(ra, rb, strict=True):
        torch.testing.assert_close(oa, ob, **TOL)
        for x, y in zip(ga, gb, strict=True):
            torch.testing.assert_close(x, y, **TOL)
    for x, y in zip(pa, pb, strict=True):
        torch.testing.assert_close(x, y, **TOL)


@pytest.mark.parametrize(
    "device_ids", [(0, 1), (1, 0), (0,), (0, 1, 2, 3), (3, 1, 0, 2)], ids=lambda d: str(list(d))
)
@pytest.mark.parametrize("batch", [16, 13, 2])
def test_training_matches_one_gpu(device_ids, batch):
    gpus(max(device_ids) + 1)
    source = torch.device("cuda", device_ids[0])
    reference = conv_net().to(source)
    parallel = copy.deepcopy(reference)
    dp = lp.DataParallel(parallel, device_ids=list(device_ids))
    data = batches(batch)
    assert_close_records(
        train(parallel, dp, data, source), train(reference, reference, data, source)
    )


@pytest.mark.parametrize("device_ids", [(0, 1), (1, 0), (0, 1, 2, 3)])
def test_agrees_with_torch_data_parallel(device_ids):
    gpus(max(device_ids) + 1)
    source = torch.device("cuda", device_ids[0])
    ours = conv_net().to(source)
    theirs = copy.deepcopy(ours)
    data = batches(12)
    a = train(ours, lp.DataParallel(ours, list(device_ids)), data, source)
    b = train(theirs, nn.DataParallel(theirs, list(device_ids)), data, source)
    assert_close_records(a, b)


def test_default_uses_every_gpu_and_names_them():
    gpus(2)
    dp = lp.DataParallel(nn.Linear(2, 2).cuda())
    assert dp.device_ids == list(range(torch.cuda.device_count()))
    assert lp.device_type() == "cuda"
    assert "simulated" not in repr(dp)
    assert torch.cuda.get_device_name(0) in dp.src_device.describe()


def test_identical_gpus_pass_the_balance_check():
    gpus(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lp.DataParallel(nn.Linear(2, 2).cuda(), [0, 1])


def test_module_on_the_wrong_gpu_is_named():
    gpus(2)
    dp = lp.DataParallel(nn.Linear(2, 2).to("cuda:1"), [0, 1])
    with pytest.raises(
        RuntimeError,
        match=r"on device cuda:0 \(device_ids\[0\]\) but parameter 'weight' is on cuda:1",
    ):
        dp(torch.ones(4, 2, device="cuda:0"))


def test_cpu_module_then_cuda_works_like_pytorch():
    gpus(2)
    dp = lp.DataParallel(nn.Linear(2, 2), [0, 1]).cuda()
    assert dp(torch.ones(4, 2)).device == torch.device("cuda:0")


def test_outputs_gather_to_cpu_and_inputs_may_start_on_cpu():
    gpus(2)
    net = nn.Linear(3, 1).cuda()
    out = lp.DataParallel(net, [0, 1], output_device="cpu")(torch.ones(6, 3))
    assert out.device == torch.device("cpu") and out.shape == (6, 1)


def test_gathering_onto_the_host_waits_for_the_copies():
    gpus(2)
    # Outputs made by slow kernels just before the gather: a copy to the host
    # that did not block would be read by torch.cat before it finished. Each round's
    # values differ, so reused host buffers still holding the last round's are caught.
    torch.manual_seed(0)
    inputs = [torch.randn(4096, 4096, device=f"cuda:{i}") for i in range(2)]
    for round in range(4):
        outputs = [(x @ x @ x).tanh() + round for x in inputs]
        assert torch.equal(lp.gather(outputs, "cpu"), torch.cat([o.cpu() for o in outputs]))
    # Backward gathers the input's gradient onto the host when the input starts there.
    net = nn.Linear(4096, 4096).cuda()
    x = torch.randn(64, 4096, requires_grad=True)
    lp.DataParallel(net, [0, 1])(x).pow(2).sum().backward()
    x_ref = x.detach().cuda().requires_grad_()
    net(x_ref).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad.cpu(), rtol=1e-4, atol=1e-4)


def test_replicas_run_on_their_gpu_in_persistent_workers_with_the_callers_stream():
    gpus(2)

    class Where(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x):
            stream = torch.cuda.current_stream()
            return {
                "device": torch.cuda.current_device(),
                "stream": (stream.device.index, stream.cuda_stream),
                "thread": threading.get_ident(),
                "dtype": (x * self.w @ torch.ones(1, 1, device=x.device)).dtype,
                "y": x * self.w,
            }

    dp = lp.DataParallel(Where().cuda(), [0, 1])
    side = [torch.cuda.Stream(device=i) for i in range(2)]
    # Make side streams current on both GPUs; the last one leaves GPU 0 current.
    with (
        torch.cuda.stream(side[1]),
        torch.cuda.stream(side[0]),
        torch.autocast("cuda", dtype=torch.bfloat16),
    ):
        first = dp(torch.ones(4, 1, device="cuda:0"))
    torch.cuda.synchronize()
    second = dp(torch.ones(4, 1, device="cuda:0"))
    assert first["device"] == [0, 1]
    # Non-tensor leaves gather into one list per member: ([devices], [stream handles]).
    assert first["stream"] == ([0, 1], [side[0].cuda_stream, side[1].cuda_stream])
    assert first["dtype"] == [torch.bfloat16, torch.bfloat16]  # dtype carried, not just "enabled"
    assert first["thread"] == second["thread"] and len(set(first["thread"])) == 2


def test_replica_error_names_the_gpu():
    gpus(2)

    class Fails(nn.Module):
        def forward(self, x):
            if x.device.index == 1:
                raise ValueError("bad batch")
            return x

    with pytest.raises(ValueError, match=r"Caught ValueError in replica 1 on device cuda:1 \(.*H"):
        lp.DataParallel(Fails(), [0, 1])(torch.ones(4, 1, device="cuda:0"))
    assert lp.DataParallel(nn.Identity(), [0, 1])(torch.ones(4, 1, device="cuda:0")).shape == (4, 1)


def test_broadcast_and_scatter_gradcheck_on_gpus():
    gpus(2)
    from torch.autograd import gradcheck, gradgradcheck

    from learn_parallel.devices import Device
    from learn_parallel.replicate import Broadcast
    from learn_parallel.scatter_gather import Gather, Scatter

    devices = [Device("cuda", 0), Device("cuda", 1)]
    w = torch.randn(3, 2, dtype=torch.double, device="cuda:0", requires_grad=True)

    def broadcast(w):
        a, b = Broadcast.apply(devices, w)
        return (a * a).sum() + 2 * (b * b).sum().to("cuda:0")

    def round_trip(w):
        pieces = Scatter.apply([d.torch_device for d in devices], None, 0, w)
        return Gather.apply(torch.device("cuda:0"), 0, pieces[0] * 3, pieces[1] * pieces[1])

    for fn in (broadcast, round_trip):
        assert gradcheck(fn, (w,))
        assert gradgradcheck(fn, (w,))
