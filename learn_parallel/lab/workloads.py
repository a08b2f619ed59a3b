"""The benchmark's models and synthetic batches, shared by every implementation.

Each (one device, both DataParallels, DDP in its own processes) builds its model from the
same `Workload` and seed, so all start from identical weights and see data of one shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

CONV_MODELS = ("auto", "resnet18", "small_cnn")


@dataclass(frozen=True)
class Workload:
    """One benchmark workload: ``kind`` is ``"mlp"`` or ``"conv"``; batch is global."""

    kind: str
    batch: int
    width: int = 2048  # mlp: features in and out of every layer
    layers: int = 4  # mlp: number of Linear layers
    image_size: int = 128  # conv: square RGB images
    model: str = "auto"  # conv: "resnet18", "small_cnn" or "auto"
    classes: int = 1000  # conv: output classes

    def resolved(self) -> Workload:
        """``model="auto"`` becomes torchvision's ResNet-18 when torchvision imports."""
        if self.kind == "mlp":
            return Workload(**{**asdict(self), "model": "mlp"})
        if self.model != "auto":
            return self
        try:
            import torchvision  # noqa: F401
        except ImportError:
            return Workload(**{**asdict(self), "model": "small_cnn", "classes": 10})
        return Workload(**{**asdict(self), "model": "resnet18"})

    def describe(self) -> str:
        if self.kind == "mlp":
            return f"MLP {self.layers} x {self.width}, batch {self.batch} x {self.width}"
        name = {"resnet18": "ResNet-18", "small_cnn": "small CNN"}.get(self.model, self.model)
        size = self.image_size
        return f"{name}, batch {self.batch} x 3x{size}x{size}"

    def to_dict(self) -> dict:
        return asdict(self)


class SmallCNN(nn.Module):
    """A ResNet-shaped toy (conv, BatchNorm, ReLU, pooling) for machines without torchvision."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for c_in, c_out, stride in ((3, 32, 1), (32, 64, 2), (64, 128, 2)):
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def build_model(workload: Workload, seed: int = 0) -> nn.Module:
    """The workload's model on the CPU, with weights fixed by ``seed``."""
    workload = workload.resolved()
    torch.manual_seed(seed)
    if workload.kind == "mlp":  # Linear layers, a ReLU between each two
        width = workload.width
        blocks = [m for _ in range(workload.layers) for m in (nn.ReLU(), nn.Linear(width, width))]
        return nn.Sequential(*blocks[1:])
    if workload.model == "resnet18":
        import torchvision

        return torchvision.models.resnet18(num_classes=workload.classes)
    if workload.model == "small_cnn":
        return SmallCNN(workload.classes)
    raise ValueError(f"Unknown conv model {workload.model!r}; choose from {CONV_MODELS}.")


def make_batch(
    workload: Workload, rows: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and targets for ``rows`` samples, created directly on ``device``."""
    workload = workload.resolved()
    generator = torch.Generator(device="cpu").manual_seed(seed)
    if workload.kind == "mlp":
        x = torch.randn(rows, workload.width, generator=generator)
        y = torch.randn(rows, workload.width, generator=generator)
    else:
        size = workload.image_size
        x = torch.randn(rows, 3, size, size, generator=generator)
        y = torch.randint(0, workload.classes, (rows,), generator=generator)
    return x.to(device), y.to(device)


def loss_function(workload: Workload, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if workload.kind == "mlp":
        return F.mse_loss(output, target)
    return F.cross_entropy(output, target)


# The benchmark's two workloads at three sizes, for every tool that runs them: the GPU
# size of every recording, a size for simulated devices on a CPU, and a quick one (tests,
# the chapters' live cells).
SIZES = {
    "gpu": {"mlp": Workload("mlp", 4096), "conv": Workload("conv", 512)},
    "cpu": {"mlp": Workload("mlp", 512, width=512), "conv": Workload("conv", 32, image_size=32)},
    "quick": {
        "mlp": Workload("mlp", 64, width=128),
        "conv": Workload("conv", 16, image_size=16, model="small_cnn"),
    },
}


def standard_workloads(size: str) -> dict[str, Workload]:
    """``SIZES[size]`` (``"gpu"``, ``"cpu"`` or ``"quick"``), the conv net resolved."""
    return {kind: w.resolved() for kind, w in SIZES[size].items()}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
