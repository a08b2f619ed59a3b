"""Simulated devices accept what CUDA accepts and refuse what CUDA refuses (issue 22).

Each test's docstring says in one line what CUDA does; the test shows that a
simulated device does the same, with values (and gradients where autograd is
involved) checked against the CPU.
"""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from _training import SimDevices
from torch import nn
from torch.utils.checkpoint import checkpoint

from learn_parallel.sim import memory_allocated

SIM = SimDevices(4)


@pytest.fixture(autouse=True)
def _current_device_back_to_0():
    yield
    torch.sim.set_device(0)


def mixing(a: str, b: str) -> str:
    return (
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}"
    )


# ---------------------------------------------------------------- too strict before


def test_cpu_index_tensors_and_masks_read_and_write():
    """CUDA: x[idx_cpu], x[mask_cpu], x[idx_cpu] = v and x[mask_cpu] = 0 all work."""
    x = torch.arange(6.0, device=SIM[1], requires_grad=True)
    idx, mask = torch.tensor([4, 0]), torch.tensor([True, False] * 3)
    picked = x[idx]
    assert picked.device == SIM[1] and picked.tolist() == [4.0, 0.0]
    assert x[mask].tolist() == [0.0, 2.0, 4.0]
    (picked * torch.tensor([1.0, 2.0], device=SIM[1])).sum().backward()
    assert x.grad.device == SIM[1] and x.grad.tolist() == [2.0, 0, 0, 0, 1.0, 0]
    y = torch.zeros(6, device=SIM[1])
    y[idx] = torch.tensor([7.0, 8.0], device=SIM[1])
    y[mask] = 1.0
    assert y.device == SIM[1] and y.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    y[torch.tensor([1, 3])] = torch.tensor(5.0)  # a 0-dim CPU value joins, as on CUDA
    assert y.tolist() == [1.0, 5.0, 1.0, 5.0, 1.0, 0.0]
    with pytest.raises(RuntimeError, match=mixing("sim:1", "sim:2")):
        y[idx.to(SIM[2])]  # CUDA refuses index tensors on another GPU
    with pytest.raises(RuntimeError, match=mixing("sim:1", "cpu")):
        y[idx] = torch.tensor([1.0, 2.0])  # ... and values on the CPU


def _saved(model: nn.Module) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize(
    "map_location, where",
    [(None, "sim:1"), ("cpu", "cpu"), ("sim:2", "sim:2"), ({"sim:1": "sim:3"}, "sim:3")],
)
def test_save_and_load_a_state_dict_with_map_location(map_location, where):
    """CUDA: torch.load (weights-only too) rebuilds on the saved GPU or where map_location says."""
    torch.manual_seed(0)
    cpu = nn.Linear(3, 2)
    state = torch.load(_saved(copy.deepcopy(cpu).to(SIM[1])), map_location=map_location)
    assert {t.device for t in state.values()} == {torch.device(where)}
    if where == "cpu":
        assert all(type(t) is torch.Tensor for t in state.values())
    restored = nn.Linear(3, 2).to(where)
    restored.load_state_dict(state)
    x = torch.randn(4, 3)
    torch.testing.assert_close(restored(x.to(where)).cpu(), cpu(x), rtol=0, atol=0)


def test_a_generator_of_a_simulated_device():
    """CUDA: torch.Generator(device="cuda:1") makes a generator of that GPU, seeded on its own."""
    gen = torch.Generator(device="sim:1")
    assert gen.device == SIM[1] and isinstance(gen, torch.Generator)
    assert isinstance(torch.Generator(), torch.Generator)  # CPU generators are unchanged
    assert torch.Generator(device="cpu").device == torch.device("cpu")
    shuffled = torch.utils.data.DataLoader(range(6), shuffle=True, generator=torch.Generator())
    assert sorted(int(i) for i in torch.cat(list(shuffled))) == list(range(6))
    first = torch.randn(5, device=SIM[1], generator=gen.manual_seed(5))
    assert gen.initial_seed() == 5
    state = gen.get_state()
    second = torch.randn(5, device=SIM[1], generator=gen)
    gen.set_state(state)
    assert torch.equal(torch.randn(5, device=SIM[1], generator=gen).cpu(), second.cpu())
    gen.manual_seed(5)
    assert torch.equal(torch.randn(5, device=SIM[1], generator=gen).cpu(), first.cpu())
    cpu = torch.randn(5, generator=torch.Generator().manual_seed(5))
    assert not torch.equal(first.cpu(), cpu)  # not the CPU's stream (see item 11)


def test_foreach_over_lists_that_span_devices_runs_per_device():
    """CUDA: _foreach_add_ over tensors on several GPUs falls back to a per-tensor path."""
    xs = [torch.full((2,), float(i), device=d) for i, d in enumerate(SIM[:3])]
    ys = [torch.ones(2, device=d) for d in SIM[:3]]
    torch._foreach_add_(xs, ys, alpha=2.0)
    assert [x.device for x in xs] == SIM[:3]
    assert [x.tolist() for x in xs] == [[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    sums = torch._foreach_mul(xs, 0.5)
    assert [s.device for s in sums] == SIM[:3] and sums[2].tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match=mixing("sim:0", "sim:1")):
        torch._foreach_add_(xs[:2], ys[1::-1])  # pairs must still share a device


def test_an_optimizer_over_parameters_on_two_devices_with_foreach():
    """CUDA: SGD(foreach=True) over parameters on two GPUs steps each on its own GPU."""
    torch.manual_seed(0)
    params = [torch.randn(3, dtype=torch.float64) for _ in range(2)]
    updated = []
    for foreach, devices in ((True, SIM[:2]), (False, ["cpu", "cpu"])):
        ps = [nn.Parameter(p.to(d)) for p, d in zip(params, devices)]
        opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=foreach)
        for _ in range(2):
            for p in ps:
                p.grad = p.detach() * 2
            opt.step()
        updated.append([p.detach().cpu() for p in ps])
    for got, expected in zip(*updated):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_numpy_asks_for_a_copy_to_the_cpu_first():
    """CUDA: .numpy() raises TypeError "can't convert cuda:0 ... Use Tensor.cpu() ..."."""
    x = torch.arange(3.0, device=SIM[2])
    advice = r"can't convert sim:2 device type tensor to numpy\. Use Tensor\.cpu\(\)"
    with pytest.raises(TypeError, match=advice):
        x.numpy()
    with pytest.raises(TypeError, match=advice):
        np.asarray(x)
    assert x.cpu().numpy().tolist() == x.numpy(force=True).tolist() == [0.0, 1.0, 2.0]


# ---------------------------------------------------------------- too lenient before


def test_a_gradient_given_on_the_wrong_device_is_refused():
    """CUDA: backward(cpu_grad) raises "invalid gradient at index 0 - expected device cuda:0"."""
    w = torch.ones(3, device=SIM[0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match="invalid gradient at index 0 - expected device sim:0 but got cpu"
    ):
        (w * 2).backward(torch.ones(3))
    with pytest.raises(RuntimeError, match="index 0 - expected device sim:0 but got sim:1"):
        torch.autograd.grad(w * 2, w, torch.ones(3, device=SIM[1]))
    (w * 2).sum().backward(torch.tensor(3.0))  # a 0-dim gradient is moved, as on CUDA
    assert w.grad.device == SIM[0] and w.grad.tolist() == [6.0, 6.0, 6.0]


class Scale(torch.autograd.Function):
    """forward(ctx, factor, a, b) -> a * factor + b; backward sends b's gradient to ``where``."""

    @staticmethod
    def forward(ctx, factor, a, b, where):
        ctx.factor, ctx.where = factor, where
        return a * factor + b

    @staticmethod
    def backward(ctx, grad):
        return None, grad * ctx.factor, grad.to(ctx.where), None


def test_a_custom_backward_that_returns_a_gradient_on_the_wrong_device_is_refused():
    """CUDA: a backward returning a CPU gradient for a cuda:0 input raises "invalid gradient"."""
    a = torch.ones(2, device=SIM[0], requires_grad=True)
    b = torch.ones(2, device=SIM[0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match="invalid gradient at index 1 - expected device sim:0 but got cpu"
    ):
        Scale.apply(3.0, a, b, "cpu").sum().backward()
    assert a.grad is None and b.grad is None
    Scale.apply(3.0, a, b, SIM[0]).sum().backward()  # the right device: gradients arrive
    assert a.grad.tolist() == [3.0, 3.0] and b.grad.tolist() == [1.0, 1.0]
    assert b.grad.device == SIM[0]


def test_a_cpu_generator_is_refused_by_a_simulated_device():
    """CUDA: randn(device="cuda:1", generator=cpu_gen) raises "Expected a 'cuda' device type"."""
    cpu_gen = torch.Generator().manual_seed(0)
    with pytest.raises(
        RuntimeError, match="Expected a 'sim' device type for generator but found 'cpu'"
    ):
        torch.randn(3, device=SIM[1], generator=cpu_gen)
    with pytest.raises(RuntimeError, match="Expected a 'sim' device type for generator"):
        torch.empty(3, device=SIM[1]).uniform_(generator=cpu_gen)
    assert torch.randn(3, device=SIM[1], generator=torch.Generator(device="sim:0")).device == SIM[1]


def test_copying_to_a_device_that_does_not_exist_is_refused():
    """CUDA: x.to("cuda:9") with four GPUs raises "invalid device ordinal"."""
    x = torch.ones(2, device=SIM[0])
    for move in (
        lambda: x.to("sim:9"),
        lambda: torch.ones(2).to("sim:4"),
        lambda: x.to(torch.device("sim", 5)),
    ):
        with pytest.raises(RuntimeError, match=r"Invalid device ordinal.*sim:\d does not exist"):
            move()
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.sim.set_device(4)


# ---------------------------------------------------------------- the device model


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8, dtype=torch.float64)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.linear(x)).tanh()


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_with_dropout_gives_the_gradients_of_the_plain_forward(use_reentrant):
    """CUDA: checkpoint saves and restores the GPU's random state, so dropout replays exactly."""
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        block = Block().to(SIM[1])
        x = torch.randn(16, 8, dtype=torch.float64).to(SIM[1]).requires_grad_()
        out = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        out.sum().backward()
        grads.append([out.detach().cpu(), x.grad.cpu(), block.linear.weight.grad.cpu()])
    for plain, replayed in zip(*grads):
        torch.testing.assert_close(replayed, plain, rtol=0, atol=0)
    assert 40 < (grads[0][0] == 0).sum() < 88  # dropout dropped about half of 128


def test_rng_state_per_device_and_fork_rng():
    """CUDA: torch.cuda.get_rng_state(i) and set_rng_state(state, i) save, restore GPU i's state."""
    state = torch.sim.get_rng_state(2)
    first = torch.rand(4, device=SIM[2]).cpu()
    torch.sim.set_rng_state(state, "sim:2")
    assert torch.equal(torch.rand(4, device=SIM[2]).cpu(), first)
    with torch.random.fork_rng(devices=[2], device_type="sim"):
        inside = torch.rand(4, device=SIM[2]).cpu()
    assert torch.equal(torch.rand(4, device=SIM[2]).cpu(), inside)  # restored on the way out
    states = torch.sim.get_rng_state_all()
    assert len(states) == 4 and torch.equal(states[2], torch.sim.get_rng_state(2))


def test_the_current_device():
    """CUDA: after torch.cuda.set_device(1), device="cuda" means cuda:1; it is set per thread."""
    torch.sim.set_device(1)
    assert torch.sim.current_device() == 1
    assert torch.ones(2, device="sim").device == SIM[1]
    assert torch.randn(2, device="sim").device == SIM[1]
    with torch.sim.device(2):
        assert torch.zeros(1, device="sim").device == SIM[2]
    assert torch.sim.current_device() == 1
    seen = []
    worker = threading.Thread(target=lambda: seen.append(torch.sim.current_device()))
    worker.start()
    worker.join()
    assert seen == [0]  # another thread starts on device 0


def test_new_tensor_stays_on_the_tensors_device():
    """CUDA: x.new_tensor(data) is made on x's device, whatever the current device."""
    x = torch.ones(2, device=SIM[2])
    made = x.new_tensor([1.0, 2.0])
    assert made.device == SIM[2] and made.tolist() == [1.0, 2.0]
    assert x.new_zeros(3).device == SIM[2]


def test_memory_allocated_defaults_to_the_current_device_and_takes_a_device():
    """CUDA: torch.cuda.memory_allocated() counts the current GPU; it also takes a torch.device."""
    torch.sim.set_device(3)
    before = torch.sim.memory_allocated()
    block = torch.empty(250, device=SIM[3])  # 1000 bytes
    assert torch.sim.memory_allocated() - before == 1000
    assert torch.sim.memory_allocated(SIM[3]) == torch.sim.memory_allocated("sim:3")
    assert torch.sim.memory_allocated(torch.device("sim:3")) == memory_allocated(3)
    del block
    assert torch.sim.memory_allocated() == before


def test_a_devices_stream_is_not_the_cpus_but_every_device_draws_the_same():
    """CUDA: with one seed every GPU draws the same numbers, not the CPU's (another generator)."""
    torch.manual_seed(0)
    on_cpu = torch.rand(64)
    on_devices = [torch.rand(64, device=d).cpu() for d in SIM]
    assert all(torch.equal(on_devices[0], other) for other in on_devices[1:])
    assert not torch.equal(on_cpu, on_devices[0])
    torch.manual_seed(0)
    cpu_mask = nn.functional.dropout(torch.ones(64), 0.5)
    sim_mask = nn.functional.dropout(torch.ones(64, device=SIM[1]), 0.5).cpu()
    assert not torch.equal(cpu_mask, sim_mask)  # a CPU reference with dropout does not match


def test_a_seed_set_before_the_devices_exist_still_applies():
    """CUDA: torch.manual_seed before CUDA initialises is queued and seeds every GPU then."""
    code = (
        "import torch\n"
        "from learn_parallel.devices import Device\n"
        "{first}\n"
        "torch.manual_seed(0)\n"
        "{second}\n"
        "print(torch.randn(3, device=d).tolist())\n"
    )
    make = "d = Device('sim', 0).torch_device"
    env = {**os.environ, "LEARN_PARALLEL_SIMULATE": "1"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code.format(first=a, second=b)],
            capture_output=True, text=True, env=env, timeout=120,
        ).stdout
        for a, b in ((make, ""), ("", make))
    ]  # fmt: skip
    assert runs[0] and runs[0] == runs[1], runs
