"""A sentence of a chapter tied to the recording it speaks of, and the recordings' names.

The chapters' claims are registered by part in `_claims_pieces`, `_claims_variants`,
`_claims_speed` and `_claims_threads`; `test_claims` checks them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    chapter: str
    text: str  # a verbatim piece of the chapter's Markdown
    holds: Callable[[], bool]  # checks the text against the recording it speaks of
    recording: str  # which recording, for the reader of this file


BENCH = "bench.json of the chapters' machine"
WORKERS = "persistent_workers.json"
