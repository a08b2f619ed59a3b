"""Simulated devices fail where GPUs fail.

What these tests prove: a tensor on ``sim:i`` and one on ``sim:j`` (or a
CPU tensor that is not a 0-dim scalar) cannot meet in one operation, and the
error names both devices as CUDA's does; moving between devices copies; each
device has its own random generator, seeded by ``torch.manual_seed`` as CUDA
seeds every GPU; each device counts the bytes that live on it; and the five
notebook cells that once passed on simulated devices but failed on 4 GPUs now
fail on a laptop too. Autograd, parameters, optimizers and state dicts keep
working on simulated tensors (float64 comparisons: rtol=1e-10, atol=1e-12).
"""

from __future__ import annotations

import copy

import pytest
import torch
from _training import SimDevices
from torch import nn

import learn_parallel as lp
from learn_parallel.sim import max_memory_allocated, memory_allocated, reset_peak_memory_stats

SIM = SimDevices(4)
IDS = [0, 1, 2, 3]
TOL = {"rtol": 1e-10, "atol": 1e-12}


def mixing(a: str, b: str) -> str:
    """The error CUDA gives for two devices in one operation, with ours' names."""
    return (
        "Expected all tensors to be on the same device, "
        f"but found at least two devices, {a} and {b}"
    )


# ---------------------------------------------------------------- distinct devices


def test_simulated_devices_are_torch_devices_distinct_from_each_other_and_the_cpu():
    assert SIM[1] == torch.device("sim", 1) == torch.device("sim:1")
    assert len(set(SIM)) == 4 and torch.device("cpu") not in SIM
    x = torch.ones(2, device="sim:2")
    assert x.device == SIM[2] and x.device.type == "sim" and not x.is_cpu
    assert "device='sim:2'" in repr(x)
    assert torch.sim.device_count() == lp.device_count() == 4


def test_adding_pieces_from_two_devices_fails_like_on_gpus():
    pieces = lp.scatter(torch.arange(8.0), IDS)
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        pieces[0] + pieces[1]


def test_a_replicas_output_added_to_a_tensor_on_the_source_device_fails():
    net = nn.Linear(3, 2).to(SIM[0])
    replicas = lp.replicate(net, [0, 1])
    out = replicas[1](torch.randn(4, 3, device=SIM[1]))
    with pytest.raises(RuntimeError, match=mixing("sim:1", "sim:0")):
        out + torch.zeros(4, 2, device=SIM[0])
    assert (out.to(SIM[0]) + torch.zeros(4, 2, device=SIM[0])).device == SIM[0]  # the fix


def test_a_model_left_on_the_cpu_while_the_batch_is_on_device_0_fails():
    net = nn.Linear(3, 2)
    x = torch.randn(4, 3, device=SIM[0])
    with pytest.raises(RuntimeError, match=mixing("sim:0", "cpu")):
        net(x)
    with pytest.raises(RuntimeError, match=r"on device sim:0 .*'weight' is on cpu.*to\('sim:0'\)"):
        lp.DataParallel(net, IDS)(x)


def test_cpu_scalars_may_join_as_on_cuda():
    x = torch.ones(3, device=SIM[1])
    y = x * torch.tensor(2.0)  # a 0-dim CPU tensor is accepted, as CUDA accepts it
    assert y.device == SIM[1] and y.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match=mixing("sim:1", "cpu")):
        x * torch.tensor([2.0])
    with pytest.raises(RuntimeError, match=mixing("sim:1", "sim:2")):
        x * torch.tensor(2.0, device=SIM[2])  # a 0-dim tensor on another device is not


def test_gather_onto_any_existing_device_is_allowed_as_on_gpus():
    outputs = [torch.full((2,), float(i), device=d) for i, d in enumerate(SIM[:2])]
    for target, where in ((3, SIM[3]), ("sim:2", SIM[2]), ("cpu", "cpu"), (-1, "cpu")):
        gathered = lp.gather(outputs, target)
        assert gathered.device == torch.device(where)
        assert gathered.cpu().tolist() == [0.0, 0.0, 1.0, 1.0]


def test_gather_onto_a_device_that_does_not_exist_is_refused():
    outputs = [torch.ones(2, device=d) for d in SIM[:2]]
    with pytest.raises(ValueError, match=r"Device sim:7 does not exist: only 4 simulated devices"):
        lp.gather(outputs, 7)
    with pytest.raises(RuntimeError, match=r"sim:9 does not exist: there are 4"):
        torch.empty(2, device="sim:9")


# ---------------------------------------------------------------- copies, not views


def test_moving_between_devices_copies():
    x = torch.arange(4.0, device=SIM[0])
    y = x.to(SIM[1])
    assert y.device == SIM[1] and y.data_ptr() != x.data_ptr()
    y.add_(10)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    host = y.cpu()
    assert type(host) is torch.Tensor and host.tolist() == [10.0, 11.0, 12.0, 13.0]


def test_scattered_pieces_are_copies_except_piece_0_already_on_device_0():
    # As on GPUs: .to() of a chunk already on its device returns the chunk, a view.
    x = torch.arange(8.0, device=SIM[0])
    pieces = lp.scatter(x, IDS)
    assert pieces[0].data_ptr() == x.data_ptr()
    assert all(p.data_ptr() != x.data_ptr() + 8 * i for i, p in enumerate(pieces) if i)
    pieces[1].mul_(0)
    assert x.tolist() == list(map(float, range(8)))  # the caller's input is untouched
    # From the host, every piece is a copy, piece 0 too.
    host = torch.arange(8.0)
    from_host = lp.scatter(host, IDS)
    assert [p.device for p in from_host] == SIM
    from_host[0].mul_(0)
    assert host.tolist() == list(map(float, range(8)))


def test_replicas_own_their_parameters_on_their_devices():
    net = nn.Linear(3, 2).to(SIM[0])
    replicas = lp.replicate(net, IDS)
    assert [r.weight.device for r in replicas] == SIM
    assert len({r.weight.data_ptr() for r in replicas}) == 4


# ---------------------------------------------------------------- the five notebook cells


def test_notebook_cell_cat_of_per_replica_outputs_fails():
    # parallel_apply chapter: torch.cat(outputs) joined outputs from four devices.
    model = nn.Linear(3, 2).to(SIM[0])
    inputs = lp.scatter(torch.randn(8, 3, device=SIM[0]), IDS)
    outputs = lp.parallel_apply(lp.replicate(model, IDS), inputs)
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        torch.cat(outputs)
    assert lp.gather(outputs, SIM[0]).shape == (8, 2)  # the fix the chapter uses


def test_notebook_cell_every_replica_fed_the_source_devices_batch_fails():
    # replicate chapter: sum(r(x).sum() for r in replicas) with x on the source device.
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh()).to(SIM[0])
    replicas = lp.replicate(model, IDS)
    x = torch.randn(5, 3, device=SIM[0])
    # Replica 1's weights are on sim:1 (its bias comes first in addmm), x on sim:0.
    with pytest.raises(RuntimeError, match=mixing("sim:1", "sim:0")):
        sum(r(x).sum() for r in replicas).backward()


def test_notebook_cell_sum_of_per_replica_losses_fails():
    # replicate chapter's exercise: sum(r(p).sum() for r, p in zip(replicas, pieces)).
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh()).to(SIM[0])
    pieces = lp.scatter(torch.randn(10, 3, device=SIM[0]), IDS)
    replicas = lp.replicate(model, IDS)
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        sum(r(p).sum() for r, p in zip(replicas, pieces))


def test_notebook_cell_weighted_sum_of_scattered_pieces_fails():
    # scatter chapter: sum(((i + 1) * p).sum() for i, p in enumerate(pieces)).backward()
    x = torch.arange(10.0, device=SIM[0], requires_grad=True)
    pieces = lp.scatter(x, IDS)
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        sum(((i + 1) * p).sum() for i, p in enumerate(pieces)).backward()
    # The fix: bring every term to one device first; gradients flow back through Scatter.
    sum(((i + 1) * p).sum().to(SIM[0]) for i, p in enumerate(pieces)).backward()
    assert x.grad.tolist() == [1.0] * 3 + [2.0] * 3 + [3.0] * 3 + [4.0]


def test_notebook_cell_stack_of_per_replica_means_fails():
    # gather chapter's check: torch.stack([p.mean() for p in lp.scatter(...)]).
    per_row = torch.rand(8, device=SIM[0])
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        torch.stack([p.mean() for p in lp.scatter(per_row, IDS)])


# ---------------------------------------------------------------- random streams


class Dropper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.linear(x))


def seeded_step(seed: int, disturb_cpu: bool = False) -> tuple[torch.Tensor, list]:
    torch.manual_seed(seed)
    model = Dropper().to(SIM[0])
    x = torch.ones(32, 16, device=SIM[0])
    if disturb_cpu:
        torch.rand(1000)  # draws from the CPU's generator only
    out = lp.DataParallel(model, IDS)(x)
    out.sum().backward()
    return out.cpu(), [p.grad.cpu() for p in model.parameters()]


def test_a_seeded_step_with_dropout_is_reproducible_on_four_devices():
    first, grads = seeded_step(0)
    again, grads_again = seeded_step(0)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    for a, b in zip(grads, grads_again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    other, _ = seeded_step(1)
    assert not torch.equal(first, other)


def test_each_device_draws_from_its_own_generator_not_the_cpus():
    first, _ = seeded_step(0)
    disturbed, _ = seeded_step(0, disturb_cpu=True)
    torch.testing.assert_close(first, disturbed, rtol=0, atol=0)


def test_manual_seed_seeds_every_device_alike_as_cuda_does():
    # torch.manual_seed -> torch.cuda.manual_seed_all: the same seed on every GPU,
    # so equal-sized pieces draw the same dropout mask on every device.
    out, _ = seeded_step(0)
    masks = (out != 0).chunk(4)
    assert all(torch.equal(masks[0], m) for m in masks[1:])
    # Seeding one device (torch.sim.manual_seed, like torch.cuda.manual_seed) sets it apart.
    torch.manual_seed(0)
    torch.sim.manual_seed(123)  # the current device, sim:0
    a = torch.rand(8, device=SIM[0]).cpu()
    b = torch.rand(8, device=SIM[1]).cpu()
    assert not torch.equal(a, b)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(8, device=SIM[1]).cpu(), b)


def test_random_operations_without_a_generator_argument_use_the_devices_stream():
    for draw in (
        lambda d: torch.randn_like(torch.ones(6, device=d)),
        lambda d: torch.rand_like(torch.ones(6, device=d)),
        lambda d: torch.randint_like(torch.ones(6, device=d), 100),
        lambda d: nn.functional.dropout(torch.ones(6, device=d), 0.5),
    ):
        torch.manual_seed(3)
        first = draw(SIM[2]).cpu()
        torch.manual_seed(3)
        torch.rand(50)
        assert torch.equal(draw(SIM[2]).cpu(), first)


# ---------------------------------------------------------------- memory accounting


def test_bytes_per_device_match_the_tensors_that_live_there():
    before = [memory_allocated(i) for i in IDS]
    a = torch.empty(1000, dtype=torch.float32, device=SIM[1])  # 4000 bytes
    b = torch.empty(10, 10, dtype=torch.float64, device=SIM[1])  # 800 bytes
    view = a[100:200]  # a view holds no memory of its own
    c = a.to(SIM[2])  # a copy does
    after = [memory_allocated(i) for i in IDS]
    assert [x - y for x, y in zip(after, before)] == [0, 4800, 4000, 0]
    del a  # the view keeps the storage alive, as on a GPU
    assert memory_allocated(1) - before[1] == 4800
    del view, b, c
    assert [memory_allocated(i) for i in IDS] == before


def test_peak_memory_is_kept_until_reset():
    reset_peak_memory_stats(3)
    base = memory_allocated(3)
    big = torch.empty(25_000, device=SIM[3])  # 100 kB
    del big
    assert memory_allocated(3) == base
    assert max_memory_allocated(3) == base + 100_000
    assert torch.sim.max_memory_allocated(3) == base + 100_000
    reset_peak_memory_stats(3)
    assert max_memory_allocated(3) == base


def test_replication_puts_a_copy_of_the_parameters_on_each_other_device():
    net = nn.Linear(100, 50).to(SIM[0])  # 5050 floats: 20200 bytes
    before = [memory_allocated(i) for i in IDS]
    replicas = lp.replicate(net, IDS, detach=True)
    grown = [memory_allocated(i) - b for i, b in zip(IDS, before)]
    assert grown == [0, 20200, 20200, 20200]  # replica 0 shares the original's storage
    del replicas


# ---------------------------------------------------------------- PyTorch keeps working


def test_training_with_adam_and_state_dicts_matches_the_cpu():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    sim = copy.deepcopy(cpu).to(SIM[1])
    assert all(isinstance(p, nn.Parameter) and p.device == SIM[1] for p in sim.parameters())
    x = torch.randn(16, 4, dtype=torch.float64)
    for model, batch in ((cpu, x), (sim, x.to(SIM[1]))):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            model(batch).pow(2).mean().backward()
            optimizer.step()
    for p, q in zip(sim.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.cpu(), q, **TOL)
    with pytest.raises(AssertionError, match="device"):
        torch.testing.assert_close(next(sim.parameters()), next(cpu.parameters()))
    restored = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double().to(SIM[2])
    restored.load_state_dict(sim.state_dict())
    assert next(restored.parameters()).device == SIM[2]
    torch.testing.assert_close(restored(x.to(SIM[2])).cpu(), cpu(x), **TOL)
    assert isinstance(restored(x.to(SIM[2])).sum().item(), float)


def test_module_to_keeps_tied_weights_tied():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.out = nn.Linear(3, 5, bias=False)
            self.out.weight = self.embed.weight

    tied = Tied().to(SIM[1])
    assert tied.out.weight is tied.embed.weight and tied.embed.weight.device == SIM[1]


def test_gradcheck_through_a_copy_between_devices():
    x = torch.randn(3, 2, dtype=torch.float64, device=SIM[0], requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: (t.to(SIM[1]) ** 3).to(SIM[0]), (x,))


def test_autocast_on_simulated_devices_follows_cpu_autocast():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    sim = copy.deepcopy(cpu).to(SIM[1])
    x, y = torch.randn(5, 8), torch.randn(5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = cpu(x)
        expected_loss = nn.functional.mse_loss(expected, y)
    with torch.autocast("sim", dtype=torch.bfloat16):
        got = sim(x.to(SIM[1]))
        loss = nn.functional.mse_loss(got, y.to(SIM[1]))
    assert got.dtype == expected.dtype == torch.bfloat16
    assert loss.dtype == expected_loss.dtype == torch.float32  # mse_loss runs in float32
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
    loss.backward()
    expected_loss.backward()
    for p, q in zip(sim.parameters(), cpu.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_recurrent_layers_match_the_cpu(kind):
    # On accelerators PyTorch runs LSTM and GRU through fused cells with no CPU
    # kernel; simulated devices compute those cells themselves.
    torch.manual_seed(0)
    cpu = kind(3, 4, num_layers=2, batch_first=True).double()
    sim = copy.deepcopy(cpu).to(SIM[1])
    x = torch.randn(5, 6, 3, dtype=torch.float64)
    expected, _ = cpu(x)
    got, _ = sim(x.to(SIM[1]))
    torch.testing.assert_close(got.cpu(), expected, **TOL)
    expected.pow(2).sum().backward()
    got.pow(2).sum().backward()
    for p, q in zip(sim.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)


def test_in_place_shape_changes_reach_the_simulated_tensor():
    x = torch.arange(6.0, device=SIM[2]).reshape(2, 3)
    x.transpose_(0, 1)
    assert x.shape == (3, 2) and x.stride() == (1, 3)
    assert x.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    x.unsqueeze_(0)
    assert x.shape == (1, 3, 2) and (x + 1).shape == (1, 3, 2)
