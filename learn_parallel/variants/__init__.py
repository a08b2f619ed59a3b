"""Variants of DataParallel that change one of its four steps.

options (`OptionsDataParallel`: scatter and gather that take options),
tuple_parallel (`TupleParallel`: one pre-split batch per device) and clone_replicate
(`CloneDataParallel`: libtorch's replicate step). The engines that go past
DataParallel's structure live in ``learn_parallel.ladder``.
"""

from learn_parallel.variants.clone_replicate import CloneDataParallel
from learn_parallel.variants.options import OptionsDataParallel, gather_per_device
from learn_parallel.variants.tuple_parallel import PerDeviceCollate, TupleParallel, split_batch

__all__ = [
    "CloneDataParallel",
    "OptionsDataParallel",
    "PerDeviceCollate",
    "TupleParallel",
    "gather_per_device",
    "split_batch",
]
