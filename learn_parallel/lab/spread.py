"""Compare two timed configurations by their spread, and call a tie a tie.

``Spread.of(samples)`` keeps the minimum, quartiles, median and maximum of one
configuration's samples; ``compare(a, b)`` calls ``a`` faster or slower than ``b`` only
when their bands do not overlap. The band: ``"range"`` (minimum to maximum) for a few
interleaved repeats of a whole run; ``"middle"`` (first to third quartile) for the many
step times of one run, where one slow step (a garbage collection) would stretch the range.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Band = Literal["range", "middle"]


@dataclass(frozen=True)
class Spread:
    """Summary of repeated samples of one configuration (times: lower is better)."""

    low: float
    q1: float
    median: float
    q3: float
    high: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("Spread.of needs at least one sample, got none.")
        ordered = sorted(float(s) for s in samples)
        if len(ordered) == 1:
            q1 = q3 = ordered[0]
        else:
            q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        return cls(ordered[0], q1, statistics.median(ordered), q3, ordered[-1], len(ordered))

    def band(self, which: Band = "range") -> tuple[float, float]:
        """The interval two configurations are compared by."""
        if which == "range":
            return self.low, self.high
        if which == "middle":
            return self.q1, self.q3
        raise ValueError(f"Unknown band {which!r}: use 'range' or 'middle'.")

    def describe(self, which: Band = "range", unit: str = "ms", digits: int = 2) -> str:
        """``'median 20.02 ms (19.72-20.49, middle half of 30)'`` and the like, each number
        to ``digits`` decimals (more where two bands would otherwise print as touching)."""
        lo, hi = self.band(which)
        name = "range" if which == "range" else "middle half"
        f = f".{digits}f"
        return f"median {self.median:{f}} {unit} ({lo:{f}}-{hi:{f}}, {name} of {self.n})"


Verdict = Literal["faster", "slower", "tie"]


def compare(
    a: Sequence[float] | Spread, b: Sequence[float] | Spread, band: Band = "range"
) -> Verdict:
    """Is ``a`` faster, slower, or tied with ``b``? Faster only if its band lies wholly below."""
    sa = a if isinstance(a, Spread) else Spread.of(a)
    sb = b if isinstance(b, Spread) else Spread.of(b)
    (a_lo, a_hi), (b_lo, b_hi) = sa.band(band), sb.band(band)
    if a_hi < b_lo:
        return "faster"
    if b_hi < a_lo:
        return "slower"
    return "tie"
