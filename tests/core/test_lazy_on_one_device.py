"""A lazy module on one device: one device makes no replica, so every wrapper calls the module
itself, and its first call initialises it, as torch's DataParallel does. On two devices a
lazy module is refused before any replica is made.
"""

import pytest
import torch
from _training import SimDevices
from torch import nn

import learn_parallel as lp
from learn_parallel.variants import OptionsDataParallel, TupleParallel

SIM = SimDevices(2)


def _lazy_and_batch() -> tuple[nn.Module, torch.Tensor]:
    return nn.LazyLinear(3).to(SIM[0]), torch.ones(2, 5, device=SIM[0])


def test_torchs_data_parallel_on_one_device_initialises_a_lazy_module():
    module, x = _lazy_and_batch()
    out = torch.nn.DataParallel(module, device_ids=[0])(x)
    assert out.shape == (2, 3) and module.weight.shape == (3, 5)


WRAPPERS = {
    "DataParallel": lambda m, x, ids: lp.DataParallel(m, device_ids=ids)(x),
    "data_parallel": lambda m, x, ids: lp.data_parallel(m, x, device_ids=ids),
    # TupleParallel takes one batch per device, each already on its device
    "TupleParallel": lambda m, x, ids: TupleParallel(m, device_ids=ids)(
        tuple(part.to(SIM[k]) for k, part in enumerate(x.chunk(len(ids))))
    ),
    "OptionsDataParallel": lambda m, x, ids: OptionsDataParallel(m, device_ids=ids)(x),
}


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_lazy_module_on_one_device_initialises_in_its_first_call(wrapper):
    module, x = _lazy_and_batch()
    out = WRAPPERS[wrapper](module, x, [0])
    out = out[0] if isinstance(out, tuple | list) else out
    assert module.weight.shape == (3, 5) and out.shape == (2, 3)
    torch.testing.assert_close(out, module(x), rtol=0, atol=0)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_lazy_module_on_two_devices_is_refused_before_any_replica(wrapper):
    module, x = _lazy_and_batch()
    with pytest.raises(RuntimeError, match=r"Cannot replicate .* uninitialized \(lazy\)"):
        WRAPPERS[wrapper](module, x, [0, 1])
    assert isinstance(module.weight, nn.parameter.UninitializedParameter)
