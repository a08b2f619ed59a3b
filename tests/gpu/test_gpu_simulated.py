"""On two GPUs: the behaviour simulated devices copy from CUDA really is CUDA's.

Simulated devices (tests/sim/test_simulated.py) are built to match these; if one
of these fails on a new PyTorch, the simulation must follow.
"""

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu


def test_mixing_two_gpus_gives_the_error_simulated_devices_copy():
    a, b = torch.ones(2, device="cuda:0"), torch.ones(2, device="cuda:1")
    with pytest.raises(
        RuntimeError,
        match="Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:(0 and cuda:1|1 and cuda:0)",
    ):
        a + b
    assert (a * torch.tensor(2.0)).device == a.device  # a 0-dim CPU tensor may join


def test_manual_seed_gives_every_gpu_the_same_stream():
    # What simulated devices copy: equal-shaped pieces draw the same dropout mask.
    torch.manual_seed(0)
    masks = [nn.functional.dropout(torch.ones(64, device=f"cuda:{i}"), 0.5).cpu() for i in range(2)]
    assert torch.equal(masks[0], masks[1])
    torch.manual_seed(0)
    again = nn.functional.dropout(torch.ones(64, device="cuda:1"), 0.5).cpu()
    assert torch.equal(again, masks[1])


def test_moving_between_gpus_copies_and_a_chunk_already_there_is_a_view():
    x = torch.arange(8.0, device="cuda:0")
    piece0, piece1 = x.chunk(2)[0].to("cuda:0"), x.chunk(2)[1].to("cuda:1")
    assert piece0.data_ptr() == x.data_ptr()  # already there: .to() returns the view
    piece1.mul_(0)
    assert x.tolist() == list(map(float, range(8)))
