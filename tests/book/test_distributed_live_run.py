"""The distributed chapter's live DDP run says what it ran on, on a CPU and on GPUs alike.

``ddp_timeline.compare`` picks NCCL where two GPUs or more are visible and gloo otherwise, so
the cell that prints its table must tag a gloo run alone as no reading of the GPU aim, and
the table's hardware line (the DDP ranks') must not stand for our DataParallel, which drove
its devices from one process. The cell runs here on a report of each kind: the GPU recording
as it is (NCCL), and the same report as if gloo had run it.
"""

from __future__ import annotations

import copy
import types

import pytest
from _book import BOOK

from learn_parallel.lab import ddp_timeline, records

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")

TAG = " (CPU, gloo: not a reading of the GPU aim)"


def _cells():
    return nbformat.read(BOOK / "distributed.ipynb", as_version=4).cells


def _live_cell():
    (cell,) = [c for c in _cells() if "LIVE = ddp_timeline.compare(" in c.source]
    return cell


def _run(report: dict) -> tuple[str, dict]:
    """The live cell's printed text and names, with ``compare`` returning ``report``."""
    printed: list[str] = []
    fake = types.SimpleNamespace(
        compare=lambda *args, **kwargs: report, step_table=ddp_timeline.step_table
    )
    names = {
        "ddp_timeline": fake,
        "Workload": lambda *args, **kwargs: None,
        "print": lambda *args: printed.append(" ".join(map(str, args))),
    }
    exec(_live_cell().source, names)
    return "\n".join(printed), names


@pytest.fixture(scope="module")
def recorded() -> dict:
    report = records.read_json("distributed.json")
    if report is None:
        pytest.skip("no distributed.json recorded")
    return report


def test_an_nccl_live_run_has_no_cpu_tag_and_names_each_rows_hardware(recorded):
    assert recorded["backend"] == "nccl"
    text, names = _run(recorded)
    assert TAG not in text
    lines = text.splitlines()
    assert lines[0] == f"both DDPs: {recorded['label']}"
    assert lines[0] == "both DDPs: 2 x NVIDIA H200 (NCCL, one process per GPU)"
    assert lines[1] == "learn_parallel.DataParallel: 2 x NVIDIA H200, from one process"
    assert lines[2].startswith("host clock, GPUs synchronized, median of 30 steps")
    assert "learn_parallel.DataParallel from one process" in names["PANELS"]


def test_a_gloo_live_run_is_tagged(recorded):
    report = copy.deepcopy(recorded)
    report["backend"] = "gloo"
    text, _ = _run(report)
    lines = text.splitlines()
    assert text.count(TAG) == 1
    assert lines[-2].startswith("  our DDP / torch's DDP: ") and lines[-2].endswith(TAG)
    assert lines[-1].endswith("buckets")  # the line after the table: no tag


def test_the_stored_cpu_run_says_both_kinds_of_hardware():
    shown = "".join(o.get("text", "") for o in _live_cell().outputs)
    assert "talking through gloo" in shown
    assert "both DDPs: 2 CPU processes on 2 cores (gloo)\n" in shown
    assert "learn_parallel.DataParallel: 2 simulated CPU devices, from one process\n" in shown
    assert TAG in shown


def test_the_prose_says_which_backend_the_live_run_takes():
    prose = " ".join(" ".join(c.source.split()) for c in _cells() if c.cell_type == "markdown")
    assert (
        "On a machine with two GPUs or more (simulated devices not forced) they are two NCCL"
        in prose
    )
    assert "otherwise they are two gloo processes on the CPU" in prose
    assert "only a gloo run's table ends with the tag" in prose
