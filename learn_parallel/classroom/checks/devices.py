"""Checks for the devices chapter."""

from __future__ import annotations

import torch
from torch import nn

from learn_parallel.classroom import exercise, grading
from learn_parallel.classroom.judge import observe
from learn_parallel.classroom.placement import Moves
from learn_parallel.classroom.tools import machine
from learn_parallel.devices import DeviceCapacity


@exercise("devices-imbalance", "The weakest device")
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


def _describe_wrapper(fn, module: nn.Module) -> dict:
    """Run the answer where it lives and describe the DataParallel it made, as data."""
    source = machine().devices[-2].torch_device
    with Moves() as moves:
        dp = fn(module)
    described = {
        "devices": [str(d) for d in dp.devices],
        "output_device": str(dp.output_device),
        "sent": moves.module_sent_to(dp.module, source),
        "parameters": sorted({str(p.device) for p in dp.module.parameters()}),
        "repr": dp.extra_repr(),
    }
    described["out"] = dp(torch.randn(6, 4, device=source)) if described["sent"] else None
    return described


@exercise("devices-last-two", "The last two devices")
def last_two(fn) -> str:
    here = machine()
    assert len(here.devices) >= 2, "this exercise needs at least two devices"
    dp = observe(_describe_wrapper, fn, nn.Linear(4, 2))
    expected = [str(d) for d in here.devices[-2:]]
    assert dp["devices"] == expected, (
        f"devices are {dp['devices']}, expected the last two: {expected}"
    )
    assert dp["output_device"] == "cpu", f"output_device is {dp['output_device']}, expected cpu"
    assert dp["sent"] and dp["parameters"] == [str(here.devices[-2])], (
        f"the module's parameters were not moved to {here.devices[-2]}, the first of the two "
        f"devices (DataParallel expects the module there): call module.to(...)"
    )
    out = dp["out"]
    assert out.device.type == "cpu", f"outputs landed on {out.device}, expected cpu"
    return dp["repr"]
