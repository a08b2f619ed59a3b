"""Two wrapped networks in a chain, with and without a round trip in between (options chapter).

netA turns images into a wide feature map, netB turns it into class scores; one training
step is timed two ways: *scattered*, netA with ``gather_to_one_device=False`` hands each
device's piece straight to netB with ``inputs_are_scattered=True``; *regathered*, plain
DataParallel twice, so the feature map (and its gradient) is gathered on the first device
and split again. The chapter runs `measure` live beside the run recorded on GPUs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from learn_parallel.data_parallel import DataParallel
from learn_parallel.devices import resolve_devices
from learn_parallel.lab.timing import step_times_ms
from learn_parallel.variants.options import OptionsDataParallel


@dataclass(frozen=True)
class Config:
    batch: int
    image_size: int
    features: int  # channels of the feature map passed from netA to netB
    classes: int
    warmup: int
    steps: int

    @property
    def feature_map_mb(self) -> float:
        return self.batch * self.features * self.image_size**2 * 4 / 1e6


class FeatureNet(nn.Module):
    """netA: a cheap convolution that widens 3 channels to ``features``."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, features, 3, padding=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(images))


class Head(nn.Module):
    """netB: narrows the feature map, pools it, and scores the classes."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(features, 16, 3, padding=1)
        self.fc = nn.Linear(16, classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(features)).mean((2, 3)))


def training_step(
    net_a: nn.Module, net_b: nn.Module, optimizer, images: torch.Tensor, labels: torch.Tensor
) -> Callable[[], None]:
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net_b(net_a(images)), labels).backward()
        optimizer.step()

    return step


def measure(n: int, config: Config) -> dict:
    """Time both chains on the first ``n`` devices."""
    devices = resolve_devices(list(range(n)))
    source = devices[0].torch_device
    torch.manual_seed(0)
    net_a = FeatureNet(config.features).to(source)
    net_b = Head(config.features, config.classes).to(source)
    images = torch.randn(config.batch, 3, config.image_size, config.image_size, device=source)
    labels = torch.randint(config.classes, (config.batch,), device=source)
    optimizer = torch.optim.SGD([*net_a.parameters(), *net_b.parameters()], lr=1e-3)
    ids = [d.index for d in devices]
    chains = {
        "scattered": (
            OptionsDataParallel(net_a, ids, gather_to_one_device=False),
            OptionsDataParallel(net_b, ids, inputs_are_scattered=True),
        ),
        "regathered": (DataParallel(net_a, ids), DataParallel(net_b, ids)),
    }
    # Both chains must compute the same thing, or the timing compares nothing.
    with torch.no_grad():
        scattered, regathered = (b(a(images)) for a, b in chains.values())
        difference = float((scattered - regathered).abs().max())
    times = {
        name: step_times_ms(
            training_step(a, b, optimizer, images, labels), devices, config.warmup, config.steps
        )
        for name, (a, b) in chains.items()
    }
    scattered_ms = statistics.median(times["scattered"])
    regathered_ms = statistics.median(times["regathered"])
    return {
        "devices": n,
        "device_ids": ids,
        "scattered_median_ms": scattered_ms,
        "regathered_median_ms": regathered_ms,
        "speedup": regathered_ms / scattered_ms,
        "scattered_steps_ms": times["scattered"],
        "regathered_steps_ms": times["regathered"],
        "max_abs_output_difference": difference,
    }
