"""Checks for the devices chapter."""

from __future__ import annotations

import torch
from torch import nn

from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.tools import Moves, machine
from learn_parallel.devices import DeviceCapacity


@exercise("devices-imbalance")
def weakest(fn) -> str:
    gb = 2**30

    def gpus(*sizes: tuple[int, int]) -> list[DeviceCapacity]:
        return [DeviceCapacity(memory * gb, sms) for memory, sms in sizes]

    cases = [
        (gpus((80, 132), (80, 132)), None),
        (gpus((80, 132), (24, 132)), 1),
        (gpus((80, 60), (80, 132)), 0),
        (gpus((80, 132), (70, 132)), None),
        (gpus((40, 132), (80, 132), (9, 9)), 2),
        (gpus((80, 132), (40, 132), (40, 132)), 1),
    ]
    if grading():
        cases += [
            (gpus((80, 132), (80, 132), (80, 132), (80, 98)), 3),
            (gpus((16, 40), (80, 132)), 0),
        ]
    for capacities, expected in cases:
        got = fn(capacities)
        assert got == expected, f"weakest({capacities}) should be {expected}, got {got}"
    return f"{len(cases)} cases"


@exercise("devices-last-two")
def last_two(fn) -> str:
    here = machine()
    assert len(here.devices) >= 2, "this exercise needs at least two devices"
    module = nn.Linear(4, 2)
    with Moves() as moves:
        dp = fn(module)
    expected = [str(d) for d in here.devices[-2:]]
    assert [str(d) for d in dp.devices] == expected, (
        f"devices are {[str(d) for d in dp.devices]}, expected the last two: {expected}"
    )
    assert str(dp.output_device) == "cpu", f"output_device is {dp.output_device}, expected cpu"
    source = here.devices[-2].torch_device
    assert moves.module_sent_to(dp.module, source), (
        f"the module's parameters were not moved to {here.devices[-2]}, the first of the two "
        f"devices (DataParallel expects the module there): call module.to(...)"
    )
    out = dp(torch.randn(6, 4, device=source))
    assert out.device.type == "cpu", f"outputs landed on {out.device}, expected cpu"
    return dp.extra_repr()
