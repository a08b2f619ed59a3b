"""The ladder: engines that go past DataParallel's structure, one rung a file.

kept_replicas (replicas built once, refreshed in place), buckets (gradients grouped
and handed on during backward), graphs (CUDA graphs of a replica's work), fast
(`FastDataParallel`: DataParallel's interface over those three), collectives (what
replicas send each other), replicated (`ReplicatedStep`: one process training as
DDP's processes do) and distributed (a minimal `DistributedDataParallel`, one process
per device). The ladder chapter (``book/ladder.ipynb``) climbs them in that order; launch
and train (``torchrun -m learn_parallel.ladder.train``) run that DDP on one node or several.
"""

from learn_parallel.ladder.distributed import DistributedDataParallel
from learn_parallel.ladder.fast import FastDataParallel
from learn_parallel.ladder.replicated import ReplicatedStep

__all__ = ["DistributedDataParallel", "FastDataParallel", "ReplicatedStep"]
