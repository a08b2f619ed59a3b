"""Three things once silently different from torch's DataParallel, now as torch does them.

The functional form on one device calls the module itself; `scatter` of a bare tensor
returns a tuple; a non-empty list or dict argument reaches each replica as its own
shallow copy, an empty one as the caller's object (the differential test,
``tests/core/test_differential.py``, found all three).
"""

from __future__ import annotations

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


class TaggedTotal(nn.Module):
    """Returns a 0-dim tensor and a string, and has a parameter it never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor):
        return self.used(x).sum(), "tag"


@pytest.mark.parametrize("output_device", [None, 1, -1])
def test_functional_form_on_one_device_calls_the_module_as_torchs_does(output_device):
    """torch's data_parallel calls the module itself on one device: output_device unused."""
    results, x = [], torch.randn(4, 3)
    for function in (torch.nn.parallel.data_parallel, lp.data_parallel):
        torch.manual_seed(0)
        module = TaggedTotal().to("sim:0")
        total, tag = function(module, x, [0], output_device)
        total.backward()
        results.append((total, tag, module.unused.weight.grad, module.used.weight.grad))
    (theirs, ours) = results
    for total, tag, unused_grad, _ in results:
        assert total.shape == () and total.device == torch.device("sim:0") and tag == "tag"
        assert unused_grad is None
    assert_close(ours[0].cpu(), theirs[0].cpu())
    assert_close(ours[3].cpu(), theirs[3].cpu())


def test_functional_form_on_one_device_refuses_a_module_elsewhere_as_torchs_does():
    for function in (torch.nn.parallel.data_parallel, lp.data_parallel):
        with pytest.raises(RuntimeError, match="module must have its parameters and buffers"):
            function(TaggedTotal().to("sim:1"), torch.randn(4, 3), [0])


def test_scatter_of_a_bare_tensor_is_a_tuple_and_of_a_container_a_list_as_in_torch():
    x = torch.randn(8, 3).to("sim:0")
    for given in (x, (x,), [x], {"x": x}):
        theirs, ours = torch.nn.parallel.scatter(given, [0, 1]), lp.scatter(given, [0, 1])
        assert type(ours) is type(theirs) is (tuple if given is x else list)


class Logs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, log: list, settings: dict):
        log.append(len(x))
        settings["seen"] = True
        return self.lin(x)


@pytest.mark.parametrize("wrapper", [TORCH_DP, OURS_DP], ids=["torch", "ours"])
def test_each_replica_gets_its_own_copy_of_a_list_or_dict_argument(wrapper):
    log, settings = ["start"], {"scale": 2}
    wrapper(Logs().to("sim:0"), [0, 1, 2])(torch.randn(6, 3), log, settings)
    assert log == ["start"] and settings == {"scale": 2}


@pytest.mark.parametrize("wrapper", [TORCH_DP, OURS_DP], ids=["torch", "ours"])
def test_an_empty_list_or_dict_argument_is_shared_by_every_replica_as_in_torch(wrapper):
    """torch's scatter rebuilds only non-empty containers: an empty one reaches every
    replica as the caller's own object, and each appends to it from its worker thread."""
    log, settings = [], {}
    wrapper(Logs().to("sim:0"), [0, 1, 2])(torch.randn(6, 3), log, settings)
    assert log == [2, 2, 2] and settings == {"seen": True}
