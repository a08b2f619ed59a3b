"""The two environment variables, read in one place (`learn_parallel.sim.device_ids`).

``LEARN_PARALLEL_SIMULATED_DEVICES``: unset or empty means the default (4), as for any
option; anything but a positive integer is refused, saying what to set.
``LEARN_PARALLEL_SIMULATE``: the usual spellings of yes and no; anything else is refused
with the accepted values, never taken for a no (on a GPU machine that would quietly use
the GPUs).
"""

from __future__ import annotations

import pytest
import torch

import learn_parallel as lp
from learn_parallel import sim
from learn_parallel.sim import SIMULATE_ENV, SIMULATED_DEVICES_ENV


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_device_count_is_the_default(monkeypatch, value):
    monkeypatch.setenv(SIMULATED_DEVICES_ENV, value)
    assert sim.device_count() == sim.DEFAULT_SIMULATED_DEVICES == 4


@pytest.mark.parametrize("value", ["2", " 3 "])
def test_a_device_count_is_read_as_given(monkeypatch, value):
    monkeypatch.setenv(SIMULATED_DEVICES_ENV, value)
    assert sim.device_count() == int(value)


@pytest.mark.parametrize("value", ["0", "-1", "two", "2.5"])
def test_a_bad_device_count_is_refused_saying_what_to_set(monkeypatch, value):
    monkeypatch.setenv(SIMULATED_DEVICES_ENV, value)
    with pytest.raises(ValueError) as refused:
        sim.device_count()
    message = str(refused.value)
    assert message.startswith(f"{SIMULATED_DEVICES_ENV}={value!r} is not a positive integer")
    assert "e.g. 2" in message and "empty or unset: 4" in message


@pytest.mark.parametrize("value", ["1", "true", "True", "YES", "on", " yes "])
def test_the_usual_spellings_of_yes_force_simulation(monkeypatch, value):
    monkeypatch.setenv(SIMULATE_ENV, value)
    assert sim.simulation_forced()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # even beside a GPU
    assert lp.device_type() == "sim"


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF", ""])
def test_the_usual_spellings_of_no_leave_the_choice_to_the_machine(monkeypatch, value):
    monkeypatch.setenv(SIMULATE_ENV, value)
    assert not sim.simulation_forced()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert lp.device_type() == "cuda"


def test_unset_is_no(monkeypatch):
    monkeypatch.delenv(SIMULATE_ENV, raising=False)
    assert not sim.simulation_forced()


@pytest.mark.parametrize("value", ["y", "2", "sim", "enabled"])
def test_anything_else_is_refused_with_the_accepted_values(monkeypatch, value):
    monkeypatch.setenv(SIMULATE_ENV, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for ask in (sim.simulation_forced, lp.device_type):
        with pytest.raises(ValueError) as refused:
            ask()
        message = str(refused.value)
        assert message.startswith(f"{SIMULATE_ENV}={value!r} is neither on nor off")
        assert "1, true, yes, on" in message and "'0', 'false', 'no', 'off', ''" in message


def test_torchs_data_parallel_reads_the_same_spellings(monkeypatch):
    import importlib

    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")  # the module
    sim.enable()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(SIMULATE_ENV, "yes")
    assert data_parallel._get_available_device_type() == "sim"
    monkeypatch.setenv(SIMULATE_ENV, "off")
    assert data_parallel._get_available_device_type() == "cuda"
