"""Simulated tensors keep two GPU behaviours that reach below their wrapper.

``param.data = other`` makes the parameter share ``other``'s storage (what
FastDataParallel's flat buffers rely on), and a tensor hook that raises during
backward stops the backward with the hook's own exception, as on GPUs, instead
of ending the process.
"""

import pytest
import torch
from _training import SimDevices

SIM = SimDevices(1)


def test_setting_data_shares_the_new_tensors_storage():
    param = torch.nn.Parameter(torch.zeros(3, device=SIM[0]))
    flat = torch.ones(5, device=SIM[0])
    with torch.no_grad():
        param.data = flat[1:4].view(3)
        flat.fill_(7.0)
    assert param.device == SIM[0] and param.data_ptr() == flat[1:].data_ptr()
    assert torch.equal(param.detach().cpu(), torch.full((3,), 7.0))


@pytest.mark.parametrize("kind", ["register_hook", "register_post_accumulate_grad_hook"])
def test_a_hook_that_raises_stops_backward_with_its_own_exception(kind):
    w = torch.ones(3, dtype=torch.double, device=SIM[0], requires_grad=True)
    ran = []

    def refuse(_):
        ran.append(True)
        raise ValueError("this hook refuses the gradient")

    getattr(w, kind)(refuse)
    with pytest.raises(ValueError, match="this hook refuses the gradient"):
        (w * 2).sum().backward()
    assert ran == [True]
    # Nothing is left behind: a later backward with a hook that returns normally works.
    v = torch.ones(3, dtype=torch.double, device=SIM[0], requires_grad=True)
    getattr(v, kind)(lambda _: None)
    (v * 2).sum().backward()
    torch.testing.assert_close(v.grad.cpu(), torch.full((3,), 2.0, dtype=torch.double))
