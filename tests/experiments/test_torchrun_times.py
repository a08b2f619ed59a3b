"""The torchrun recording's bookkeeping, without starting torchrun (the GPU test does that):
which GPU counts it runs, and how a run's rank files become its entry."""

from __future__ import annotations

import json

from experiments.torchrun_times import default_counts, summarize


def test_counts_are_powers_of_two_and_every_gpu():
    assert default_counts(1) == [1]
    assert default_counts(4) == [1, 2, 4]
    assert default_counts(6) == [1, 2, 4, 6]


def _write(folder, steps_per_rank, warmup=1, same=True):
    for rank, steps in enumerate(steps_per_rank):
        record = {"rank": rank, "device": f"cuda:{rank}", "step_ms": steps}
        (folder / f"rank{rank}.json").write_text(json.dumps(record))
    summary = {"same_training": same, "across_ranks": 0.0, "one_process": 1e-8}
    summary |= {"tolerance": 1e-5, "settings": {"warmup": warmup}}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_a_step_is_as_slow_as_its_slowest_rank_after_the_warmup(tmp_path):
    _write(tmp_path, [[50.0, 1.0, 4.0, 2.0], [60.0, 3.0, 1.0, 2.5]])
    entry = summarize(2, "ours", tmp_path, 0, "")
    assert entry["status"] == "ok" and entry["slowest_step_ms"] == [3.0, 4.0, 2.5]
    assert entry["median_ms"] == 3.0 and entry["devices"] == ["cuda:0", "cuda:1"]


def test_a_run_that_failed_or_lost_a_rank_keeps_its_output(tmp_path):
    _write(tmp_path, [[1.0, 2.0]])  # one rank file of two
    entry = summarize(2, "torch", tmp_path, 0, "rank 1 died")
    assert entry["status"] == "failed" and entry["output_tail"] == "rank 1 died"
    assert summarize(1, "torch", tmp_path, 1, "boom")["status"] == "failed"
