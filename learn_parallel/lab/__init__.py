"""The lab: what the chapters import to record, measure, plot and run the core live.

The core (``learn_parallel``'s top level) never imports this subpackage; the lab imports
the core and listens to its phase marks (`learn_parallel.phases`). The runs recorded on
GPU machines ship under ``recorded/`` (`learn_parallel.lab.records` reads them).
"""
