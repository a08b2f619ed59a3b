"""The lab: what the chapters import to record, measure, plot and run the core live.

The core never imports it; it imports the core and listens to its phase marks
(`learn_parallel.phases`). GPU recordings ship under ``recorded/`` (read by `records`).
"""
