"""The lab: everything that records, measures, plots and benchmarks the core.

The core (``learn_parallel``'s top level) never imports this subpackage; the
lab imports the core and listens to its phase marks (`learn_parallel.phases`).
What the chapters run live stays here; the drivers that record runs on GPU
machines live outside the package, in the repository's ``experiments/``.
"""
