"""torch's own DataParallel, run on the simulated devices beside ours, case by case.

`learn_parallel.sim.comm` gives torch's collectives a simulated path, so
``torch.nn.DataParallel`` runs here as it does on GPUs. Each test runs torch's
and ours on the same four simulated devices and compares outputs, gradients,
buffers, warnings and errors; where ours differs on purpose (the package's
docstrings say where), the test asserts that difference instead.
"""

from __future__ import annotations

import copy
import warnings
from functools import partial
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import learn_parallel as lp
from learn_parallel import sim

TORCH_DP = torch.nn.DataParallel
OURS_DP = lp.DataParallel


@pytest.fixture(autouse=True)
def _on():
    sim.enable()


def cpu(tree: Any) -> Any:
    """``tree`` with every tensor on the CPU, detached (to compare across devices)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: cpu(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(cpu(v) for v in tree)
    return tree


def loss_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output.float().pow(2).sum()
    values = output.values() if isinstance(output, dict) else output
    return sum(loss_of(v).to("sim:0") for v in values)


def step(wrapper: Any, module: nn.Module, *args: Any, backward: bool = True, **kwargs: Any):
    """One forward (and backward) of ``wrapper(module)``: output, grads, buffers, warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = wrapper(module)(*args, **kwargs)
        if backward:
            loss_of(output).backward()
    grads = {n: cpu(p.grad) for n, p in module.named_parameters()}
    buffers = {n: cpu(b) for n, b in module.named_buffers()}
    return output, grads, buffers, [str(w.message) for w in caught]


def compare(make: Any, *args: Any, backward: bool = True, torch_kw=None, ours_kw=None, **kw):
    """Torch's and our DataParallel on copies of one module: everything must match."""
    base = make()
    torch_dp, ours_dp = partial(TORCH_DP, **(torch_kw or {})), partial(OURS_DP, **(ours_kw or {}))
    theirs = step(torch_dp, copy.deepcopy(base), *args, backward=backward, **kw)
    ours = step(ours_dp, copy.deepcopy(base), *args, backward=backward, **kw)
    assert_close(cpu(theirs[0]), cpu(ours[0]))
    assert theirs[0].device == ours[0].device if isinstance(ours[0], torch.Tensor) else True
    assert_close(theirs[1], ours[1])
    assert_close(theirs[2], ours[2])
    assert theirs[3] == ours[3] == []
    return theirs, ours


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)).to("sim:0")


def test_plain_tensor_batch_gives_torchs_outputs_and_gradients():
    theirs, _ = compare(mlp, torch.randn(8, 3))
    assert theirs[0].device == torch.device("sim:0")
    assert type(theirs[0].grad_fn).__name__ == "GatherBackward"


class ComplexScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(3, dtype=torch.complex64))

    def forward(self, x):
        return torch.view_as_real(x * self.scale)


def test_a_complex_parameter_over_several_devices_matches_torchs():
    """torch's Broadcast writes the complex copies back into each device's list."""
    torch.manual_seed(0)
    compare(lambda: ComplexScale().to("sim:0"), torch.randn(8, 3))


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 2), nn.Linear(4, 2)

    def forward(self, batch: dict, scale: torch.Tensor | None = None, flag: bool = False):
        left, (right,) = batch["pair"][0], batch["pair"][1]
        out = self.a(batch["x"]) + self.b(left) * (2 if flag else 1)
        if scale is not None:
            out = out * scale
        return {"out": out, "parts": [self.a(batch["x"]), (right.sum(1, keepdim=True),)]}


def nested() -> nn.Module:
    torch.manual_seed(1)
    return Nested().to("sim:0")


def test_nested_dict_list_tuple_inputs_and_outputs_match_torchs():
    batch = {"x": torch.randn(8, 3), "pair": [torch.randn(8, 4), (torch.randn(8, 6),)]}
    theirs, ours = compare(nested, batch)
    assert isinstance(theirs[0]["parts"][1], tuple) and isinstance(ours[0]["parts"][1], tuple)


def test_keyword_arguments_are_scattered_like_torchs():
    batch = {"x": torch.randn(8, 3), "pair": [torch.randn(8, 4), (torch.randn(8, 6),)]}
    compare(nested, batch, scale=torch.randn(8, 1), flag=True)


def test_batch_smaller_than_the_device_count_uses_fewer_replicas_like_torch():
    theirs, ours = compare(mlp, torch.randn(2, 3))
    assert theirs[0].shape == ours[0].shape == (2, 2)


class Total(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w).sum()


def test_a_scalar_per_replica_becomes_a_vector_with_a_warning_each_worded_its_own_way():
    x = torch.randn(8, 3)
    theirs = step(TORCH_DP, Total().to("sim:0"), x)
    ours = step(OURS_DP, Total().to("sim:0"), x)
    assert_close(cpu(theirs[0]), cpu(ours[0]))  # one value per replica: shape (4,)
    assert theirs[0].shape == (4,)
    assert_close(theirs[1], ours[1])
    # Documented difference: our warning says what to do (reduce, or return per-sample values).
    assert len(theirs[3]) == len(ours[3]) == 1
    assert "all input tensors were scalars" in theirs[3][0]
    assert "0-dim tensor" in ours[3][0] and ".mean()" in ours[3][0]


def batchnorm() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("sim:0")


def test_batchnorm_in_training_updates_the_same_running_statistics_as_torchs():
    theirs, _ = compare(batchnorm, torch.randn(8, 3))
    assert theirs[2]["1.num_batches_tracked"] == 1  # replica 0 shares the originals' buffers


def test_batchnorm_in_eval_mode_matches_torchs():
    compare(lambda: batchnorm().eval(), torch.randn(8, 3))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_without_grad_outputs_equal_torchs_and_one_devices_and_build_no_graph(mode):
    base, x = batchnorm().eval(), torch.randn(8, 3)
    with mode():
        expected = base(x.to("sim:0"))
        theirs = TORCH_DP(copy.deepcopy(base))(x)
        ours = OURS_DP(copy.deepcopy(base))(x)
    for output in (theirs, ours):
        assert_close(output.cpu(), expected.cpu())
        assert output.grad_fn is None and not output.requires_grad
        assert output.is_inference() == (mode is torch.inference_mode)


def test_training_batchnorm_under_inference_mode_fails_in_torchs_workers_not_ours():
    """Documented difference (parallel_apply's caller state): our workers run in the
    caller's inference mode; torch's threads do not, so replica 1 cannot update its
    inference-tensor buffers (the same threads run torch's DataParallel on GPUs)."""
    x = torch.randn(8, 3)
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            TORCH_DP(batchnorm())(x)
        assert OURS_DP(batchnorm())(x).shape == (8, 4)


class FailsOn(nn.Module):
    def __init__(self, device: int) -> None:
        super().__init__()
        self.device, self.lin = device, nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.get_device() == self.device:
            raise KeyError("no such thing")
        return self.lin(x)


def test_an_exception_in_one_replica_keeps_its_type_in_both():
    with pytest.raises(KeyError) as theirs:
        TORCH_DP(FailsOn(2).to("sim:0"))(torch.randn(8, 3))
    with pytest.raises(KeyError) as ours:
        OURS_DP(FailsOn(2).to("sim:0"))(torch.randn(8, 3))
    assert "in replica 2 on device 2" in str(theirs.value)
    # Documented difference: ours raises the replica's own exception object, with a note.
    assert ours.value.args == ("no such thing",)
    assert any("replica 2 on device sim:2" in note for note in ours.value.__notes__)


def test_output_device_outside_device_ids_matches_torchs():
    theirs, _ = compare(
        mlp,
        torch.randn(8, 3),
        torch_kw={"device_ids": [0, 1], "output_device": 3},
        ours_kw={"device_ids": [0, 1], "output_device": 3},
    )
    assert theirs[0].device == torch.device("sim:3")


def test_scattering_along_dim_1_matches_torchs():
    theirs, _ = compare(mlp, torch.randn(4, 8, 3), torch_kw={"dim": 1}, ours_kw={"dim": 1})
    assert theirs[0].shape == (4, 8, 2)


def test_a_module_left_on_the_cpu_is_refused_by_both_with_a_runtime_error():
    for wrapper in (TORCH_DP, OURS_DP):
        with pytest.raises(RuntimeError, match="module must have its parameters and buffers"):
            wrapper(nn.Linear(3, 2))(torch.randn(8, 3))
