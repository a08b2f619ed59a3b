"""DataParallel.__init__: which devices, in which order, and the errors for bad ids."""

import contextlib
import functools
import inspect
import sys

import pytest
import torch
from torch import nn

import learn_parallel as lp
from learn_parallel.devices import (
    Device,
    DeviceCapacity,
    check_balance,
    resolve_devices,
)


def test_simulation_can_be_forced_and_is_on_for_these_tests(monkeypatch):
    assert lp.device_type() == "sim"  # conftest sets LEARN_PARALLEL_SIMULATE=1
    monkeypatch.delenv("LEARN_PARALLEL_SIMULATE")
    assert lp.device_type() == ("cuda" if torch.cuda.is_available() else "sim")


def test_default_is_four_simulated_devices():
    assert lp.device_type() == "sim"
    assert lp.device_count() == 4
    dp = lp.DataParallel(nn.Linear(2, 2))
    assert dp.device_ids == [0, 1, 2, 3]
    assert [str(d) for d in dp.devices] == ["sim:0", "sim:1", "sim:2", "sim:3"]
    assert dp.output_device == Device("sim", 0)


def test_environment_variable_sets_the_simulated_device_count(monkeypatch):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "6")
    assert lp.DataParallel(nn.Linear(2, 2)).device_ids == list(range(6))


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_environment_variable_is_named(monkeypatch, value):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", value)
    with pytest.raises(ValueError, match="LEARN_PARALLEL_SIMULATED_DEVICES.*not a positive"):
        lp.device_count()


# Built in the test, not at collection: beside a GPU, "sim" is registered only when first used.
@pytest.mark.parametrize(
    "make", [lambda: 1, lambda: "sim:1", lambda: torch.device("sim", 1), lambda: Device("sim", 1)]
)
def test_ids_are_normalised(make):
    given = make()
    assert resolve_devices([given]) == [Device("sim", 1)]
    assert resolve_devices(given, output=True) == Device("sim", 1)


def test_checked_devices_pass_unchanged():
    devices = resolve_devices([2, 0])
    assert all(a is b for a, b in zip(resolve_devices(devices), devices))
    assert resolve_devices(devices[0], output=True) is devices[0]


def test_simulated_devices_say_so_everywhere():
    assert Device("sim", 2).describe() == "sim:2 (simulated on the CPU)"
    assert "(simulated on the CPU)" in repr(lp.DataParallel(nn.Linear(2, 2), [0, 1]))


def test_output_device_may_be_the_cpu():
    for cpu in ("cpu", -1, torch.device("cpu")):
        dp = lp.DataParallel(nn.Linear(2, 2), [0, 1], output_device=cpu)
        assert dp.output_device == Device("cpu")


def test_the_attributes_are_devices_not_torchs_ints():
    dp = lp.DataParallel(nn.Linear(2, 2), [0, 1], output_device=-1)
    assert isinstance(dp.output_device, Device)
    assert dp.output_device != -1  # torch's DataParallel stores -1 here
    assert not hasattr(dp, "src_device_obj")  # torch's name for what is `src_device` here


def test_output_device_defaults_to_the_first_id():
    dp = lp.DataParallel(nn.Linear(2, 2), [2, 0])
    assert dp.output_device == Device("sim", 2)
    assert dp.src_device == Device("sim", 2)


@pytest.mark.parametrize(
    "device_ids, error, message",
    [
        ([], ValueError, "device_ids is empty: pass at least one device id"),
        ([0, 1, 0], ValueError, "lists sim:0 twice .* list every id once"),
        ([0, 4], ValueError, r"sim:4 does not exist: only 4 simulated devices \(ids 0 to 3\)"),
        (["cpu"], ValueError, "Expected a non-cpu device in device_ids, but got: cpu"),
        (["cuda:0"], ValueError, "cuda:0 is not available here.*simulated CPU devices"),
        (["gpu0"], ValueError, r"Unknown device 'gpu0'; use an int, 'sim:N' or a torch.device\.$"),
        ([1.5], TypeError, r"Expected a device id \(an int, 'sim:N' or a torch.device\), got 1.5"),
        (1, TypeError, r"device_ids must be a list of ids, got 1; write \[1\]"),
    ],
)
def test_bad_device_ids_get_clear_errors(device_ids, error, message):
    with pytest.raises(error, match=message):
        lp.DataParallel(nn.Linear(2, 2), device_ids)


def test_an_unknown_output_device_names_the_forms_an_output_device_may_take():
    with pytest.raises(ValueError, match=r"use an int, 'sim:N', 'cpu' or a torch.device\.$"):
        lp.DataParallel(nn.Linear(2, 2), [0, 1], output_device="tpu:0")


def test_too_many_ids_name_the_fix():
    with pytest.raises(ValueError, match="Set LEARN_PARALLEL_SIMULATED_DEVICES to simulate more"):
        resolve_devices([7])


def test_one_device_calls_the_module_itself():
    seen = []

    class Spy(nn.Linear):
        def forward(self, x):
            seen.append(self)
            return super().forward(x)

    module = Spy(3, 1)
    out = lp.DataParallel(module, [0])(torch.ones(5, 3))
    assert seen == [module]  # the original, not a replica
    assert out.shape == (5, 1)


# The balance check compares real GPUs; fake capacities stand in for them here.
GPUS = [Device("cuda", 0), Device("cuda", 1)]


def capacities(memory, cores):
    table = {0: DeviceCapacity(memory[0], cores[0]), 1: DeviceCapacity(memory[1], cores[1])}
    return lambda device: table[device.index]


def test_balance_warns_about_a_small_gpu():
    with pytest.warns(UserWarning, match="GPU 1 has less than 75% of the memory of GPU 0"):
        assert not check_balance(GPUS, capacities([80, 40], [132, 132]))


def test_balance_warns_about_few_multiprocessors():
    with pytest.warns(UserWarning, match="GPU 0 has less than 75% of the multiprocessors of GPU 1"):
        check_balance(GPUS, capacities([80, 80], [60, 132]))


def test_the_balance_warning_points_at_the_users_line(monkeypatch):
    # However deep the wrapper's constructor calls it (a subclass adds a level), the
    # warning is shown at the line that built the wrapper, as torch's would be shown.
    data_parallel_module = sys.modules["learn_parallel.data_parallel"]  # not the function
    unbalanced = functools.partial(check_balance, capacity_of=capacities([80, 40], [132, 132]))
    monkeypatch.setattr(
        data_parallel_module, "resolve_devices", lambda ids, **kw: GPUS[0] if kw else GPUS
    )
    monkeypatch.setattr(data_parallel_module, "check_balance", unbalanced)
    for wrapper in (lp.DataParallel, lp.OptionsDataParallel):
        with pytest.warns(UserWarning, match="GPU 1 has less than 75%") as caught:
            line = inspect.currentframe().f_lineno + 2
            with contextlib.suppress(RuntimeError, ValueError):  # pretended GPUs fail later
                wrapper(nn.Linear(2, 2), [0, 1])
        assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_balanced_gpus_and_simulated_devices_do_not_warn(recwarn):
    assert check_balance(GPUS, capacities([80, 70], [132, 120]))
    assert check_balance([Device("sim", 0), Device("sim", 1)])
    assert not recwarn.list
