"""Per-device memory counters: the bytes of tensor storage that live on each simulated device.

What ``torch.sim.memory_allocated`` and friends report, as ``torch.cuda``'s do on GPUs:
live storage now, and the peak since the last reset. There is no caching allocator and
no memory limit.
"""

from __future__ import annotations

import threading
import weakref

import torch

from learn_parallel.sim.device_ids import DeviceArg, device_index


class Memory:
    """Bytes of live tensor storage on each simulated device, and the peak since reset."""

    def __init__(self) -> None:
        # Re-entrant: a storage freed while the lock is held releases its bytes here too.
        self.lock = threading.RLock()
        self.allocated: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.storages: dict[tuple[int, int], list] = {}  # (index, ptr) -> [bytes, weak ref]

    def track(self, data: torch.Tensor, index: int) -> None:
        # PyTorch keeps one Python object per storage for as long as the storage lives,
        # so a weak reference to it says when its bytes are freed, whatever tensors or
        # wrappers (module.to() swaps them) shared it.
        storage = data.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        key = (index, storage.data_ptr())
        with self.lock:
            entry = self.storages.get(key)
            if entry is None:
                ref = _StorageRef(storage, self.release)
                ref.key = key
                entry = self.storages[key] = [0, ref]
            grown = nbytes - entry[0]
            if grown > 0:  # new, or resized by an out= operation
                entry[0] = nbytes
                total = self.allocated.get(index, 0) + grown
                self.allocated[index] = total
                if total > self.peak.get(index, 0):
                    self.peak[index] = total

    def release(self, ref: _StorageRef) -> None:
        key = ref.key
        with self.lock:
            entry = self.storages.get(key)
            if entry is not None and entry[1] is ref:
                del self.storages[key]
                self.allocated[key[0]] -= entry[0]


class _StorageRef(weakref.ref):
    """A weak reference to a storage that knows its key (cheaper than a partial per storage)."""

    __slots__ = ("key",)


counters = Memory()


def memory_allocated(device: DeviceArg = None) -> int:
    """Bytes of tensor storage that live on a simulated device now (default: the current one)."""
    return counters.allocated.get(device_index(device), 0)


def max_memory_allocated(device: DeviceArg = None) -> int:
    """The most bytes a simulated device held at once since the last reset."""
    return counters.peak.get(device_index(device), 0)


def reset_peak_memory_stats(device: DeviceArg = None) -> None:
    """Start the peak of a simulated device again from what it holds now."""
    index = device_index(device)
    with counters.lock:
        counters.peak[index] = counters.allocated.get(index, 0)
