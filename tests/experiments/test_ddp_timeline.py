"""The DDP record part (``python -m experiments.ddp_timeline``) works end to end on gloo.

Tiny models and two steps: this checks the plumbing the 2 x H200 recording relies on (the
JSON it writes, the per-rank timelines, the plots, reading the file back), not speed.
"""

from __future__ import annotations

import json

from experiments import ddp_timeline as driver
from learn_parallel.lab import ddp_timeline, records


def test_record_part_writes_timelines_that_show_every_bucket(tmp_path, monkeypatch, capsys):
    out = tmp_path / "data" / "cpu-test"
    argv = ["--out", str(out), "--quick", "--warmup", "1", "--steps", "2"]
    argv += ["--timeline-steps", "2", "--bucket-cap-mb", "0.1"]
    assert driver.main(argv) == 0
    report = json.loads((out / driver.RECORD_FILE).read_text())
    assert report["backend"] == "gloo" and report["world"] == 2
    for key in ("mlp", "conv"):
        entry = report["workloads"][key]
        assert (out / f"ddp-{key}-timeline.png").stat().st_size > 0
        for impl in ("ours", "torch", "dp"):
            assert len(entry["results"][impl]["step_ms_all"]) == 2
        assert entry["ours_over_torch"] > 0
        timeline = ddp_timeline.ddp_timeline(report, key)
        for rank in (0, 1):
            last = [r for r in timeline.records if r.device == f"rank:{rank}" and r.step == 1]
            names = {r.phase for r in last}
            assert {"forward", "loss", "backward", "unflatten", "optimizer"} <= names
            reduces = [r for r in last if r.phase.startswith("all-reduce")]
            assert len(reduces) == entry["buckets"] > 1, "one all-reduce per bucket"
            backward = next(r for r in last if r.phase == "backward")
            # The first bucket is launched while backward is still running.
            assert min(r.start_ms for r in reduces) < backward.end_ms
        # One clock for both processes: the ranks' step 1 overlap (they meet in every
        # all-reduce), which two clocks started at each process's own time would not show.
        steps = {(r.device, r.phase, r.step): r for r in timeline.records}
        a, b = (steps[f"rank:{rank}", "step", 1] for rank in (0, 1))
        assert a.start_ms < b.end_ms and b.start_ms < a.end_ms, (a, b)
        assert ddp_timeline.dp_timeline(report, key).records
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path / "data"))
    assert records.load_json(driver.RECORD_FILE, "cpu-test") == report


def test_missing_recording_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LEARN_PARALLEL_DATA", str(tmp_path))
    assert records.load_json("distributed.json", "no-such-machine") is None
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "No recorded distributed.json for no-such-machine" in printed[0]
