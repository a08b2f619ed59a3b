"""Variants of DataParallel: subclasses that override some of its four steps.

options (`OptionsDataParallel`: scatter and gather that take options),
tuple_parallel (`TupleParallel`: scatter gives one pre-split batch to each device,
gather leaves the outputs in place) and clone_replicate (`CloneDataParallel`:
libtorch's replicate step). The engines that go past DataParallel's structure live
in ``learn_parallel.ladder``.
"""

from learn_parallel.variants.clone_replicate import CloneDataParallel
from learn_parallel.variants.options import OptionsDataParallel, PerDevice, gather_per_device
from learn_parallel.variants.tuple_parallel import PerDeviceCollate, TupleParallel, split_batch

__all__ = [
    "CloneDataParallel",
    "OptionsDataParallel",
    "PerDevice",
    "PerDeviceCollate",
    "TupleParallel",
    "gather_per_device",
    "split_batch",
]
