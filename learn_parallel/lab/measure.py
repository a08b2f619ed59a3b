"""The per-device measurements the chapters plot, live and recorded, under one name.

Each chapter times its piece of DataParallel on the reader's devices (GPUs or simulated)
beside the same function run on the recorded GPUs. They live by chapter in
`measure_pieces` (devices, source_device, scatter, replicate, intro, gather),
`measure_steps` (parallel_apply, data_parallel, performance, options) and `measure_tuple`
(tuple_parallel, pitfalls); `measurement` holds `Measurement` and the timers, and
`records.load_recorded` reads the recorded runs back.
"""

# ruff: noqa: F401 - what this module is for: the names the chapters call, in one place
from learn_parallel.lab.measure_pieces import (
    gather_targets,
    matmul,
    replica_forward,
    replicate_copy,
    scatter_copy,
    source_check,
)
from learn_parallel.lab.measure_steps import (
    chain,
    chain_measurement,
    parallel_apply_timeline,
    training_timeline,
    worker_overhead,
    wrapper_scaling,
)
from learn_parallel.lab.measure_tuple import peak_memory, tuple_vs_data_parallel
from learn_parallel.lab.measurement import Measurement, median_ms, wall_ms
from learn_parallel.lab.records import Recorded, load_recorded
from learn_parallel.lab.timeline import Timeline
