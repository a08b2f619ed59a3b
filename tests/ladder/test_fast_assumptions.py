"""What the bucket counting of FastDataParallel and ReplicatedStep assumes of torch 2.13.

A parameter's post-accumulate-grad hook fires once per ordinary backward, so counting arrivals
tells when a bucket is complete. Reentrant checkpointing breaks that (the ladder chapter says
so): each checkpointed segment runs a backward of its own, and a parameter used in two segments
accumulates, and fires its hook, once in each.
"""

import pytest
import torch
from torch.utils.checkpoint import checkpoint


@pytest.mark.parametrize(("reentrant", "calls"), [(True, 2), (False, 1)])
def test_a_parameter_in_two_checkpointed_segments_fires_its_hook(reentrant, calls):
    layer = torch.nn.Linear(4, 4)
    fired = []
    layer.weight.register_post_accumulate_grad_hook(lambda p: fired.append(1))
    x = torch.randn(2, 4, requires_grad=True)
    y = checkpoint(layer, x, use_reentrant=reentrant)
    z = checkpoint(layer, y, use_reentrant=reentrant)
    z.sum().backward()
    assert len(fired) == calls
