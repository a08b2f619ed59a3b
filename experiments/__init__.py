"""Experiment drivers: the runs that record what the chapters show, outside the package.

Each module is run from the repository root (``python -m experiments.<name> --out DIR``,
as ``book/data/record_gpu_runs.sh`` does) and writes one recorded file; its docstring
names the chapter that reads it. The wheel ships none of them: the chapters read the
recorded files (``learn_parallel/lab/recorded``) through `learn_parallel.lab.records`.
"""
