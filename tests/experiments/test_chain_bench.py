"""chain_bench runs end to end on simulated devices and writes a complete record.

(conftest puts these non-GPU tests on simulated devices, even on a GPU box.)

Only the structure of the record is checked, never the speed: wall-clock
numbers on a shared CPU say nothing about the code.
"""

import json

from experiments import chain_bench


def test_quick_run_writes_a_complete_record(tmp_path, capsys):
    assert chain_bench.main(["--out", str(tmp_path), "--quick", "--max-devices", "3"]) == 0
    record = json.loads((tmp_path / "chain_bench.json").read_text())
    assert record["benchmark"] == "chain_bench"
    assert record["command"].startswith("python -m experiments.chain_bench --out")
    for key in ("date", "torch_version", "python_version"):
        assert record[key]
    assert record["hardware"]["simulated"] is True
    assert record["hardware"]["label"] == "3 simulated CPU devices"
    assert record["config"]["quick"] is True
    assert [r["devices"] for r in record["results"]] == [2, 3]
    for result in record["results"]:
        steps = record["config"]["steps"]
        assert len(result["scattered_steps_ms"]) == len(result["regathered_steps_ms"]) == steps
        assert result["scattered_median_ms"] > 0 and result["regathered_median_ms"] > 0
        assert result["max_abs_output_difference"] < 1e-5  # both chains compute the same
    assert "simulated on the CPU" in capsys.readouterr().out


def test_one_device_is_refused_with_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "1")
    assert chain_bench.main(["--out", str(tmp_path), "--quick"]) == 2
    assert "LEARN_PARALLEL_SIMULATED_DEVICES" in capsys.readouterr().err
