"""learn_parallel: PyTorch's single-process DataParallel, rebuilt piece by piece.

The public names mirror ``torch.nn.parallel``; modules follow the order data
flows through one forward pass: devices -> scatter_gather -> replicate ->
parallel_apply -> data_parallel, then the variants: options (the customisable
gather/scatter options) and tuple_parallel; then the bridges: clone_replicate
(libtorch's replicate strategy), fast (FastDataParallel, the opt-in fast path) and
distributed (a minimal DistributedDataParallel, one process per device).
"""

from learn_parallel.data_parallel import DataParallel, data_parallel
from learn_parallel.devices import Device, device_count, device_type, first_device
from learn_parallel.distributed import DistributedDataParallel
from learn_parallel.fast import FastDataParallel
from learn_parallel.options import gather_per_device
from learn_parallel.parallel_apply import parallel_apply
from learn_parallel.replicate import replicate
from learn_parallel.scatter_gather import gather, scatter, scatter_kwargs
from learn_parallel.tuple_parallel import PerDeviceCollate, TupleParallel, split_batch

__all__ = [
    "DataParallel",
    "DistributedDataParallel",
    "Device",
    "FastDataParallel",
    "PerDeviceCollate",
    "TupleParallel",
    "data_parallel",
    "device_count",
    "device_type",
    "first_device",
    "gather",
    "gather_per_device",
    "parallel_apply",
    "replicate",
    "scatter",
    "scatter_kwargs",
    "split_batch",
]
__version__ = "0.1.0"
