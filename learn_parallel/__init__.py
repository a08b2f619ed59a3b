"""learn_parallel: PyTorch's single-process DataParallel, rebuilt piece by piece.

The public names mirror ``torch.nn.parallel``; modules follow the order data
flows through one forward pass: devices -> scatter_gather -> replicate ->
parallel_apply -> data_parallel. The variants that change one of those steps live
in ``learn_parallel.variants``, the engines that go past them in ``learn_parallel.ladder``;
their public classes are exported here too.
"""

from learn_parallel.data_parallel import DataParallel, data_parallel
from learn_parallel.devices import Device, device_count, device_type, first_device
from learn_parallel.ladder import DistributedDataParallel, FastDataParallel, ReplicatedStep
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate
from learn_parallel.scatter_gather import gather, scatter, scatter_kwargs
from learn_parallel.variants import (
    CloneDataParallel,
    OptionsDataParallel,
    PerDevice,
    PerDeviceCollate,
    TupleParallel,
    gather_per_device,
    split_batch,
)

__all__ = [
    # the taught pieces, in data-flow order
    "Device",
    "device_count",
    "device_type",
    "first_device",
    "scatter",
    "scatter_kwargs",
    "gather",
    "replicate",
    "parallel_apply",
    "DataParallel",
    "data_parallel",
    # the variants
    "OptionsDataParallel",
    "PerDevice",
    "gather_per_device",
    "TupleParallel",
    "PerDeviceCollate",
    "split_batch",
    "CloneDataParallel",
    # the ladder
    "FastDataParallel",
    "ReplicatedStep",
    "DistributedDataParallel",
]
__version__ = "0.1.0"
