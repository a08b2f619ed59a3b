"""learn_parallel: PyTorch's single-process DataParallel, rebuilt piece by piece.

The public names mirror ``torch.nn.parallel``; modules follow the order data
flows through one forward pass: devices -> scatter_gather -> replicate ->
parallel_apply -> data_parallel.
"""

from learn_parallel.data_parallel import DataParallel, data_parallel
from learn_parallel.devices import Device, device_count, device_type
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate
from learn_parallel.scatter_gather import gather, scatter, scatter_kwargs

__all__ = [
    "DataParallel",
    "Device",
    "data_parallel",
    "device_count",
    "device_type",
    "gather",
    "parallel_apply",
    "replicate",
    "scatter",
    "scatter_kwargs",
]
__version__ = "0.1.0"
