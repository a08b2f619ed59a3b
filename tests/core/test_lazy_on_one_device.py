"""A lazy module on one device: torch's DataParallel calls it, and its first call initialises
it; this package's forward check refuses it, although one device makes no replica (the
DataParallel chapter lists the difference).
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
    "DataParallel": lambda m, x: lp.DataParallel(m, device_ids=[0])(x),
    "data_parallel": lambda m, x: lp.data_parallel(m, x, device_ids=[0]),
    "TupleParallel": lambda m, x: TupleParallel(m, device_ids=[0])(x),
    "OptionsDataParallel": lambda m, x: OptionsDataParallel(m, device_ids=[0])(x),
}


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_this_packages_forward_check_refuses_a_lazy_module_on_one_device(wrapper):
    module, x = _lazy_and_batch()
    with pytest.raises(RuntimeError, match=r"Cannot replicate .* uninitialized \(lazy\)"):
        WRAPPERS[wrapper](module, x)
