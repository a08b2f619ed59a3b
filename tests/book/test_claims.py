"""Every measured number or verdict in the chapters' prose is tied to its recording.

A chapter prints what it measured from a cell that reads the recording (or its live run).
Where the prose itself must carry a number or a verdict about a recording, the sentence is
registered in `CLAIMS` with a function that checks it against the recording, so a new
recording that disagrees fails here instead of leaving the sentence wrong. `CLAIMS` joins
the tables of `_claims_pieces`, `_variants`, `_speed` and `_threads` (by the book's part,
see each one's docstring); each table's checks are in the `_findings_*` of the same name.

``test_no_unregistered_measured_number`` reads every Markdown cell (solutions excepted)
and finds each time (ms, µs, s), ratio (1.9x), percentage and memory amount; each must sit
inside a registered claim, or in `NOT_MEASURED` (a setting or a size, with the reason).
Verdicts ("faster", "a tie") come from `learn_parallel.lab.spread.compare` over
interleaved repeats, in the cells or in the claims' checks.
"""

from __future__ import annotations

import json
import re

import _claims_pieces
import _claims_speed
import _claims_threads
import _claims_variants
import pytest
from _book import BOOK
from _claim import Claim

CLAIMS: list[Claim] = [
    *_claims_pieces.CLAIMS,
    *_claims_variants.CLAIMS,
    *_claims_speed.CLAIMS,
    *_claims_threads.CLAIMS,
]

# Numbers in prose that were not measured: settings, sizes, shapes (chapter, text, why).
NOT_MEASURED: list[tuple[str, str, str]] = [
    ("distributed", "25 MiB", "DDP's default bucket_cap_mb, a setting"),
    ("distributed", "1 MiB", "the bucket size the chapter chooses, a setting"),
    ("distributed", "0.3 MiB", "the bucket cap the live run passes, a setting"),
    ("ladder", "25 MiB", "the bucket cap the rungs use, a setting"),
    ("ladder", "10 MiB", "torch.cuda.comm's buffer_size for coalesced calls, a setting"),
    ("performance", "10 MiB", "torch.cuda.comm's buffer_size for coalesced calls, a setting"),
    ("scatter", "16 MiB", "the size of the batch the measurement scatters (4096 x 1024 floats)"),
    ("tuple_parallel", "8 MiB", "the size of the batch the cell builds"),
    ("tuple_parallel", "4 MiB", "the size of the scatter chapter's slice (1024 x 1024 floats)"),
    ("teaching", "60 s", "the grader's default --timeout per cell, a setting"),
    ("teaching", "600 s", "the grader's default --notebook-timeout, a setting"),
    ("teaching", "4 GiB", "the grader's default --memory and its /tmp size, settings"),
    ("parallel_apply", "5 ms", "Python's default switch interval, a setting"),
    ("pitfalls", "<map object at 0x...>", "an address in the text torch's gather returns"),
    ("glossary", "<map object at 0x...>", "an address in the text torch's gather returns"),
]

MEASURED = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:ms|µs|us|s|%|x|×|MiB|MB|GiB|GB|GB/s|TB/s)(?![\w/])"
)
SHAPE = re.compile(r"\d+\s?x\s?\d")  # 512 x 1024: a shape, not a ratio


def _markdown(chapter: str) -> str:
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    return "\n\n".join(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown" and "<summary>Solution" not in "".join(c["source"])
    )


CHAPTERS = sorted(p.stem for p in BOOK.glob("*.ipynb"))


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.chapter}: {c.text[:40]}")
def test_each_claim_is_in_its_chapter_and_true_of_its_recording(claim):
    assert claim.text in _markdown(claim.chapter), f"{claim.chapter} no longer says it"
    assert claim.holds(), f"{claim.chapter}: the recording ({claim.recording}) disagrees"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_unregistered_measured_number(chapter):
    text = _markdown(chapter)
    covered = [c.text for c in CLAIMS if c.chapter == chapter]
    covered += [t for ch, t, _ in NOT_MEASURED if ch == chapter]
    loose = []
    for match in MEASURED.finditer(text):
        if SHAPE.match(text, match.start()):
            continue
        around = text[max(0, match.start() - 200) : match.end() + 200]
        if not any(c in around and match.group(0) in c for c in covered):
            loose.append(match.group(0))
    assert not loose, (
        f"{chapter}: numbers typed into the prose without a recording behind them: {loose}. "
        "Print them from the recording in a cell, or register the sentence in CLAIMS."
    )


def test_the_scanner_finds_typed_measurements_and_skips_shapes():
    found = [m.group(0) for m in MEASURED.finditer("took 24.99 ms, 1.9x DDP, 7 % and 671 MiB")]
    assert found == ["24.99 ms", "1.9x", "7 %", "671 MiB"]
    assert SHAPE.match("512 x 1024") and not SHAPE.match("1.9x")


def test_the_ladder_chapter_numbers_its_rungs_as_the_ladder_orders_them():
    # Every "rung N" of the prose names, close by, the rung that is N-th in LADDER.
    from learn_parallel.lab.ladder_rungs import LADDER

    text = _markdown("ladder")
    numbered = list(re.finditer(r"\b[Rr]ung (\d+)\b", text))
    assert numbered, "the ladder chapter numbers no rung any more: drop this test"
    for found in numbered:
        name = LADDER[int(found[1]) - 1].name
        around = text[max(0, found.start() - 80) : found.end() + 80]
        assert name in around or name.replace("_", " ") in around, (found[0], around)


def test_the_forward_share_solution_names_the_wait_before_the_gather():
    # Solutions are not scanned for claims above; this one's comment speaks of the recording.
    from _findings_speed import longest_idle_gap_is_the_wait_for_the_slowest_forward

    cells = json.loads((BOOK / "performance.ipynb").read_text())["cells"]
    (solution,) = [
        "".join(c["source"])
        for c in cells
        if "<summary>Solution" in "".join(c["source"])
        and "def forward_share" in "".join(c["source"])
    ]
    assert "the longest, before the gather, is cuda:0 waiting\n# for the slowest replica's" in (
        solution
    )
    assert longest_idle_gap_is_the_wait_for_the_slowest_forward()
