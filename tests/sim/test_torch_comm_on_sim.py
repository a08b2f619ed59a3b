"""torch.nn.parallel's functions and collectives on simulated devices, beside ours.

The CUDA facts the simulated path copies (return types, which piece is a view,
error messages) were read on one H100 with torch 2.11; each test names its fact.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.parallel as tp
from torch import nn
from torch.nn.parallel import comm
from torch.testing import assert_close

import learn_parallel as lp
from learn_parallel import sim
from learn_parallel.sim import comm as sim_comm

DEVICES = [0, 1, 2, 3]


@pytest.fixture(autouse=True)
def _on():
    sim.enable()


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to("sim:0")


def grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.cpu() for p in module.parameters()]


def test_functional_data_parallel_matches_torchs_with_module_kwargs():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = mlp()

        def forward(self, x, scale):
            return self.inner(x) * scale

    x, scale = torch.randn(8, 3), torch.randn(8, 1)
    theirs, ours = Scaled(), Scaled()
    ours.load_state_dict(theirs.state_dict())
    a = tp.data_parallel(theirs, x, DEVICES, module_kwargs={"scale": scale})
    b = lp.data_parallel(ours, x, DEVICES, module_kwargs={"scale": scale})
    assert_close(a.cpu(), b.cpu())
    a.sum().backward(), b.sum().backward()
    assert_close(grads(theirs), grads(ours))


def test_scatter_gives_the_same_pieces_and_piece_0_is_a_view_of_the_source():
    x = torch.randn(10, 3).to("sim:0")
    theirs, ours = tp.scatter(x, DEVICES), lp.scatter(x, DEVICES)
    assert [t.device for t in theirs] == [t.device for t in ours]
    assert_close([t.cpu() for t in theirs], [t.cpu() for t in ours])
    # On CUDA too: the piece already on the source device is not copied.
    assert theirs[0].data_ptr() == ours[0].data_ptr() == x.data_ptr()
    assert theirs[1].data_ptr() != x.data_ptr()


def test_gather_and_its_backward_match_torchs_including_the_cpu_target():
    pieces = [torch.randn(2, 3).to(f"sim:{i}").requires_grad_() for i in DEVICES]
    for target in (0, 2, "cpu"):
        theirs, ours = tp.gather(pieces, target), lp.gather(pieces, target)
        assert theirs.device == ours.device
        assert_close(theirs.cpu(), ours.cpu())
        weight = torch.arange(24.0).view(8, 3).to(theirs.device)
        a = torch.autograd.grad((theirs * weight).sum(), pieces)
        b = torch.autograd.grad((ours * weight).sum(), pieces)
        assert [g.device for g in a] == [g.device for g in b] == [p.device for p in pieces]
        assert_close([g.cpu() for g in a], [g.cpu() for g in b])


def test_gathering_mismatched_shapes_is_a_runtime_error_in_torch_a_value_error_in_ours():
    pieces = [torch.randn(2, 3).to("sim:0"), torch.randn(2, 4).to("sim:1")]
    # CUDA's message, word for word:
    with pytest.raises(RuntimeError, match=r"index 1 has invalid shape \[2, 4\], but expected"):
        tp.gather(pieces, 0)
    with pytest.raises(ValueError, match="differ in another dimension"):  # documented in ours
        lp.gather(pieces, 0)


def test_replicate_wires_the_same_gradients_and_shares_replica_0s_storage():
    theirs, ours = mlp(), mlp()
    a, b = tp.replicate(theirs, DEVICES), lp.replicate(ours, DEVICES)
    x = torch.randn(4, 3)
    for module in (a, b):
        sum(r(x.to(f"sim:{i}")).sum().to("sim:0") for i, r in enumerate(module)).backward()
    assert_close(grads(theirs), grads(ours))
    for reps, original in ((a, theirs), (b, ours)):
        weights = [r[0].weight for r in reps]
        assert [w.device.index for w in weights] == DEVICES
        assert weights[0].data_ptr() == original[0].weight.data_ptr()
        assert type(weights[1].grad_fn).__name__ == "BroadcastBackward"
    # Both coalesce (replicate.copy_to_devices): replica 1's tensors are views of one buffer.
    for reps in (a, b):
        layer = reps[1][0]
        assert layer.weight.untyped_storage().data_ptr() == layer.bias.untyped_storage().data_ptr()


def test_replicate_detached_builds_no_graph_in_either():
    for replicate in (tp.replicate, lp.replicate):
        replicas = replicate(mlp(), DEVICES, detach=True)
        assert all(p.grad_fn is None for r in replicas[1:] for p in r.parameters())


def test_tuple_parallels_per_replica_outputs_equal_torchs_replicate_and_parallel_apply():
    torch_module, ours = mlp(), mlp()
    batches = [torch.randn(3, 3) for _ in DEVICES]
    replicas = tp.replicate(torch_module, DEVICES)
    theirs = tp.parallel_apply(replicas, [b.to(f"sim:{i}") for i, b in enumerate(batches)])
    mine = lp.TupleParallel(ours)(batches)
    assert [t.device for t in theirs] == [t.device for t in mine]
    assert_close([t.cpu() for t in theirs], [t.cpu() for t in mine])
    for outputs in (theirs, mine):
        sum(o.pow(2).sum().to("sim:0") for o in outputs).backward()
    assert_close(grads(torch_module), grads(ours))


def test_comm_functions_return_what_cuda_returns():
    a = torch.randn(2, 3).to("sim:0")
    copies = comm.broadcast(a, [0, 1])
    assert type(copies) is list and copies[0] is a and copies[1].device.index == 1  # CUDA: same
    nested = comm.broadcast_coalesced([a], [0, 1, 2])
    assert type(nested) is list and nested[0][0] is a
    assert [type(copies) for copies in nested] == [list] * 3  # CUDA: a list per device
    assert comm.gather([a, a.double().to("sim:1")], 0, 0).dtype == torch.float32  # the first's
    assert len(comm.scatter(a[:1], [0, 1])) == 1  # a short tensor: fewer pieces
    with pytest.raises(RuntimeError, match="same length, but got len\\(devices\\) = 1"):
        comm.scatter(a, [0], [1, 1])
    with pytest.raises(RuntimeError, match=r"All tensors must be on devices\[0\]: 1"):
        comm.broadcast_coalesced([a], [1, 0])
    with pytest.raises(IndexError, match="tensor has no dimensions"):
        comm.gather([a[0, 0], a[0, 1].to("sim:1")], 0, 0)


def test_the_out_variants_fill_the_given_tensors():
    a = torch.arange(6.0).view(3, 2).to("sim:0")
    copies = [torch.empty(3, 2).to(f"sim:{i}") for i in (1, 2)]
    assert comm.broadcast(a, out=copies) == copies
    assert all(torch.equal(c.cpu(), a.cpu()) for c in copies)
    pieces = [torch.empty(1, 2).to("sim:1"), torch.empty(2, 2).to("sim:2")]
    comm.scatter(a, out=pieces)
    assert torch.equal(torch.cat([p.cpu() for p in pieces]), a.cpu())
    joined = torch.empty(3, 2).to("sim:3")
    assert comm.gather(pieces, out=joined) is joined and torch.equal(joined.cpu(), a.cpu())
    with pytest.raises(RuntimeError, match="Expected 3, but got total size 2"):
        comm.scatter(a, out=pieces[:1] + [torch.empty(1, 2).to("sim:2")])


def test_gathering_to_minus_one_warns_as_torch_does():
    pieces = [torch.ones(2).to("sim:0"), torch.ones(2).to("sim:1")]
    with pytest.warns(FutureWarning, match="Using -1 to represent CPU tensor is deprecated"):
        assert comm.gather(pieces, 0, -1).device == torch.device("cpu")


def test_reduce_add_sums_in_device_order_without_an_nccl_warning(recwarn):
    parts = [torch.full((3,), float(i + 1)).to(f"sim:{i}") for i in DEVICES]
    total = comm.reduce_add(parts, destination=1)
    assert total.device == torch.device("sim:1") and total.tolist() == [10.0] * 3
    assert not [w for w in recwarn if "NCCL" in str(w.message)]


def test_nccl_on_simulated_tensors_says_it_cannot_and_names_the_alternative():
    parts = [torch.ones(3).to(f"sim:{i}") for i in DEVICES]
    with pytest.raises(RuntimeError, match=r"nccl.reduce .* cannot run on simulated .*reduce_add"):
        torch.cuda.nccl.reduce(parts)


def test_calls_without_simulated_tensors_fall_through_to_torchs_own(monkeypatch):
    seen = []
    monkeypatch.setitem(sim_comm.ORIGINALS, "gather", lambda *a, **k: seen.append(a))
    comm.gather([torch.ones(2), torch.ones(2)], 0, -1)
    assert len(seen) == 1
    assert comm.gather is sim_comm.gather is torch.cuda.comm.gather


def test_torchs_functions_are_untouched_beside_a_gpu_until_simulated_devices_are_enabled():
    code = (
        "import torch, torch.utils, torch.cuda.nccl as nccl\n"
        "from torch.nn.parallel import comm\n"
        "torch.cuda.device_count = lambda: 1  # a GPU is visible: importing registers nothing\n"
        "before = [comm.scatter, comm.gather, comm.broadcast_coalesced, nccl.is_available,"
        " torch.utils.swap_tensors]\n"
        "import learn_parallel, learn_parallel.sim.comm as sc\n"
        "m = learn_parallel.DataParallel  # importing the package enables nothing\n"
        "now = [comm.scatter, comm.gather, comm.broadcast_coalesced, nccl.is_available,"
        " torch.utils.swap_tensors]\n"
        "assert now == before and not sc.ORIGINALS, now\n"
        "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
        "learn_parallel.sim.enable()\n"
        "assert sc.ORIGINALS['scatter'] is before[0] and comm.scatter is sc.scatter\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "LEARN_PARALLEL_SIMULATE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "ok", done.stderr


def test_torchs_dataparallel_copies_the_module_as_ours_does():
    base = mlp()
    a, b = torch.nn.DataParallel(copy.deepcopy(base)), lp.DataParallel(copy.deepcopy(base))
    assert a.device_ids == b.device_ids == DEVICES
    assert a.src_device_obj == b.src_device.torch_device == torch.device("sim:0")


def test_torch_data_parallel_picks_sim_where_simulation_is_forced_beside_a_gpu(monkeypatch):
    """A one-GPU machine running the chapters (LEARN_PARALLEL_SIMULATE=1): torch's
    DataParallel must use the simulated devices, as ours does, not the lone GPU."""
    import importlib

    # the module, not torch.nn.parallel's function of the same name
    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")

    sim.enable()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATE", "1")
    assert data_parallel._get_available_device_type() == "sim"
    assert data_parallel._get_all_device_indices() == [0, 1, 2, 3]
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATE", "0")  # not forced: torch's own choice
    assert data_parallel._get_available_device_type() == "cuda"


def test_torch_data_parallel_picks_sim_on_a_mac(monkeypatch):
    """An Apple-silicon Mac: torch would pick MPS (before PrivateUse1, torch/_utils.py) and its
    DataParallel would then just call the module; it uses the simulated devices, as ours does."""
    import importlib

    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
    sim.enable()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.delenv("LEARN_PARALLEL_SIMULATE", raising=False)
    assert data_parallel._get_available_device_type() == "sim"
    wrapped = torch.nn.DataParallel(torch.nn.Linear(3, 2).to("sim:0"))
    assert wrapped.device_ids == [0, 1, 2, 3]
    rows = []
    wrapped.module.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
    wrapped(torch.ones(8, 3, device="sim:0"))
    assert sorted(rows) == [2, 2, 2, 2]  # split over the simulated devices, not called whole


class _ReadsOneBufferUpdatesAnother(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) * self.scale  # scale is saved for backward
        self.count.add_(1)  # another buffer of the same broadcast, updated in place
        return y


@pytest.mark.parametrize("wrapper", [lp.DataParallel, nn.DataParallel], ids=["ours", "torch's"])
def test_broadcast_pieces_have_version_counters_of_their_own_as_on_cuda(wrapper):
    # CUDA's broadcast_coalesced gives every unflattened piece its own version counter
    # (comm.cpp, "Version Counter"); sharing one would make the in-place update of `count`
    # invalidate `scale`, saved for backward, and the step would fail on simulated devices only.
    pieces = sim_comm.broadcast_coalesced([torch.ones(3, device="sim:0")] * 2, [0, 1])[1]
    pieces[0].add_(1)
    assert pieces[1]._version == 0
    torch.manual_seed(0)
    x = torch.randn(8, 3, device="sim:0")
    one = _ReadsOneBufferUpdatesAnother().to("sim:0")
    model = copy.deepcopy(one)
    one(x).sum().backward()
    wrapper(model, [0, 1])(x).sum().backward()
    assert_close(grads(model), grads(one))
