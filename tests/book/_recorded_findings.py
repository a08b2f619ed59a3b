"""The findings the chapters state in words, each checked against the recording it reads.

`test_claims.CLAIMS` ties each sentence to one of the checks, so a new recording that
disagrees fails there instead of leaving the sentence wrong. Verdicts come from
`learn_parallel.lab.spread.compare`, with the band the chapter's cell uses. The checks lie
beside their claims, by the book's part: `_findings_pieces` (intro to distributed),
`_findings_variants` (tuple_parallel, options, libtorch_replicate), `_findings_speed`
(performance and ladder on the benchmarks) and `_findings_threads` (persistent_workers.json).
This module holds the readers they share.
"""

from __future__ import annotations

from _book import BOOK

LOGS = BOOK / "data" / "logs"


def _recorded():
    from learn_parallel.lab.measure import load_recorded

    return load_recorded()  # the machine the chapters read (lab.chapter.RECORDED)


def _each(name: str) -> list[dict]:
    """Every recording called ``name``, one per machine folder that has it."""
    from learn_parallel.lab import records

    machines = [m.name for m in records.recorded_root().iterdir() if m.is_dir()]
    return [r for r in (records.read_json(name, m) for m in machines) if r]
