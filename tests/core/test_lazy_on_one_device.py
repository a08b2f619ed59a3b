"""A lazy module on one device: one device makes no replica, so every wrapper calls the module
itself, and its first call initialises it, as torch's DataParallel does. On two devices a
lazy module is refused before any replica is made, and a lazy module that stays one after its
first call (no ``cls_to_become``) is refused even then, by torch's wrapper and ours alike.
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


class _Scale(nn.Module):
    def forward(self, x):
        return x * self.weight


class _LazyScale(nn.modules.lazy.LazyModuleMixin, _Scale):  # cls_to_become stays None
    def __init__(self):
        super().__init__()
        self.weight = nn.parameter.UninitializedParameter()

    def initialize_parameters(self, x):
        with torch.no_grad():
            self.weight.materialize(x.shape[-1:])
            self.weight.fill_(2.0)


class _BecomesScale(_LazyScale):
    cls_to_become = _Scale


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("wrapper", [lp.DataParallel, torch.nn.DataParallel])
def test_a_lazy_module_that_stays_lazy_is_refused_even_once_initialised(wrapper, grad):
    x = torch.ones(2, 5, device=SIM[0])
    stays, becomes = _LazyScale().to(SIM[0]), _BecomesScale().to(SIM[0])
    stays(x), becomes(x)  # both initialised by their first call
    assert isinstance(stays, _LazyScale) and type(becomes) is _Scale
    with torch.set_grad_enabled(grad):
        with pytest.raises(RuntimeError, match="uninitialized parameters can't be used"):
            wrapper(stays, device_ids=[0, 1])(x)
        out = wrapper(becomes, device_ids=[0, 1])(x)
    torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)
