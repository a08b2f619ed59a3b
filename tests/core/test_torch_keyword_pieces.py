"""Torch's ``scatter_kwargs`` pads keywords by the count of positional arguments, as the book says.

The scatter chapter and the introduction describe when torch's keywords are padded with ``{}``
(fewer keyword pieces than positional *arguments*) and when its ``parallel_apply`` fails its
assertion instead (as many or more, which one argument always gives).
"""

import pytest
import torch
from torch.nn.parallel.scatter_gather import scatter_kwargs

import learn_parallel  # noqa: F401  (registers the simulated devices)

DEVICES = [0, 1, 2, 3]


@pytest.mark.parametrize(
    "arguments, mask_rows, dicts",
    [(3, 2, 4), (3, 3, 3), (2, 2, 2), (2, 1, 4), (1, 2, 2), (1, 3, 3)],
)
def test_keywords_are_padded_only_below_the_argument_count(arguments, mask_rows, dicts):
    batch = torch.ones(8).to("sim:0")  # four pieces on four devices
    mask = torch.zeros(mask_rows).to("sim:0")
    inputs, kwargs = scatter_kwargs((batch,) * arguments, {"mask": mask}, DEVICES)
    assert len(inputs) == 4
    assert len(kwargs) == dicts
    assert sum(1 for k in kwargs if not k) == dicts - mask_rows  # the padding: empty dicts


@pytest.mark.parametrize("arguments, mask_rows", [(3, 3), (2, 2), (2, 3), (1, 2)])
def test_unpadded_keywords_fail_parallel_apply_on_the_count(arguments, mask_rows):
    batch = torch.ones(8).to("sim:0")
    mask = torch.zeros(mask_rows).to("sim:0")
    module = torch.nn.DataParallel(_Sum(), DEVICES)  # built after a device was used
    expected = f"number of modules 4 is not equal to the number of kwargs_tup {mask_rows}"
    with pytest.raises(AssertionError, match=expected):
        module(*(batch,) * arguments, mask=mask)


class _Sum(torch.nn.Module):
    def forward(self, *tensors, mask=None):
        total = sum(tensors)
        return total if mask is None else total * mask
