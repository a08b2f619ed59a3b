"""Variants of DataParallel, each built over the same four steps.

options (`OptionsDataParallel`: scatter and gather that take options) and
tuple_parallel (`TupleParallel`: one pre-split batch per device); then the
bridges: clone_replicate (`CloneDataParallel`: libtorch's replicate step), fast
(`FastDataParallel`, the opt-in fast path), replicated (`ReplicatedStep`: one process
training like DDP's) and distributed (a minimal `DistributedDataParallel`, one
process per device).
"""

from learn_parallel.variants.clone_replicate import CloneDataParallel
from learn_parallel.variants.distributed import DistributedDataParallel
from learn_parallel.variants.fast import FastDataParallel
from learn_parallel.variants.options import OptionsDataParallel, gather_per_device
from learn_parallel.variants.replicated import ReplicatedStep
from learn_parallel.variants.tuple_parallel import PerDeviceCollate, TupleParallel, split_batch

__all__ = [
    "CloneDataParallel",
    "DistributedDataParallel",
    "FastDataParallel",
    "OptionsDataParallel",
    "PerDeviceCollate",
    "ReplicatedStep",
    "TupleParallel",
    "gather_per_device",
    "split_batch",
]
