"""The command lines refuse bad input in one line, agree with each other, and print clean help.

* bad input (a bad ``LEARN_PARALLEL_SIMULATED_DEVICES``, more devices than exist, an unknown
  workload): usage, then one ``error:`` line that names the fix; no traceback; exit 2.
* ``demo --devices 9`` and ``bench --devices 1,2,9`` give the same answer (neither silently
  simulates more devices than are set up).
* ``--help`` shows no reStructuredText backticks.
* the classroom's ``track`` outside a clone, with no chapters installed, says what to fetch.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from learn_parallel import __main__ as cli
from learn_parallel.classroom import __main__ as classroom_cli
from learn_parallel.classroom import files
from learn_parallel.lab import bench

ROOT = Path(__file__).resolve().parents[2]
TOO_MANY = (
    "argument --devices: 9 devices asked for, but there are only 4 simulated devices; "
    "set LEARN_PARALLEL_SIMULATED_DEVICES=9 to simulate more"
)
BAD_ENV = "LEARN_PARALLEL_SIMULATED_DEVICES='abc' is not a positive integer"


def _one_error_line(capsys, call, prog: str, usage_lines: int = 1) -> str:
    """The one error line of a refused command (after ``usage_lines`` of usage)."""
    with pytest.raises(SystemExit) as stopped:
        call()
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == usage_lines + 1, err
    assert lines[0].startswith(f"usage: {prog}")
    assert lines[-1].startswith(f"{prog}: error: ")
    return lines[-1].removeprefix(f"{prog}: error: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--devices", "9"], TOO_MANY),
        (["bench", "--devices", "1,2,9"], TOO_MANY),
        (["bench", "--devices", "0,2"], "argument --devices: device counts must be 1 or more"),
        (["bench", "--workloads", "mlp,gpt"], "argument --workloads: unknown gpt; choose from"),
    ],
)
def test_bad_arguments_get_one_line(capsys, argv, message):
    prog = f"python -m learn_parallel {argv[0]}"
    assert _one_error_line(capsys, lambda: cli.main(argv), prog).startswith(message)


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_a_bad_device_count_variable_gets_one_line(capsys, monkeypatch, command):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "abc")
    prog = f"python -m learn_parallel {command}"
    assert _one_error_line(capsys, lambda: cli.main([command]), prog).startswith(BAD_ENV)


def test_the_issue_command_prints_one_line_not_a_traceback():
    env = {"LEARN_PARALLEL_SIMULATED_DEVICES": "abc", "LEARN_PARALLEL_SIMULATE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "learn_parallel", "demo"],
        cwd=ROOT,
        env={**__import__("os").environ, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 2, done.stderr  # usage, error
    assert BAD_ENV in done.stderr


def test_the_lab_bench_command_refuses_too_many_devices_too(capsys):
    prog = "python -m learn_parallel bench"
    error = _one_error_line(capsys, lambda: bench.main(["--devices", "9"]), prog)
    assert error == TOO_MANY


@pytest.mark.parametrize("argv", [[], ["demo"], ["bench"]])
def test_help_has_no_restructuredtext_backticks(capsys, argv):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    text = capsys.readouterr().out
    assert "usage: python -m learn_parallel" in text
    assert "`" not in text, [line for line in text.splitlines() if "`" in line]


def test_one_piece_is_singular(capsys):
    cli.main(["demo", "--devices", "1", "--batch", "3"])
    out = capsys.readouterr().out
    assert "A batch of 3 rows was split into 1 piece (after one warm-up step):" in out


def test_track_outside_a_clone_without_chapters_says_what_to_fetch(capsys, monkeypatch, tmp_path):
    installed = tmp_path / "site-packages" / "learn_parallel"
    monkeypatch.setattr(files, "PACKAGE", installed)
    monkeypatch.setattr(files, "SHIPPED", installed / "classroom" / "shipped")
    prog = "python -m learn_parallel.classroom track"
    call = lambda: classroom_cli.main(["track", str(tmp_path / "out")])  # noqa: E731
    error = _one_error_line(capsys, call, prog, usage_lines=3)  # argparse lists the tasks
    assert error.startswith(f"This copy of learn_parallel ({installed}) has no chapters: ")
    assert "pip install git+https://github.com/" in error
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_ddp_batch_too_small_fails_only_its_own_workload(monkeypatch, tmp_path):
    """With 9 processes a conv batch of 32 leaves the last rank empty, an MLP batch of 512
    does not: only the conv row fails (naming its batch); the MLP still runs under DDP."""
    import json
    import types

    from learn_parallel.lab.workloads import Workload

    groups = [
        bench.Group(Workload("mlp", 512, width=8, layers=2), None),
        bench.Group(Workload("conv", 32, image_size=8, model="small_cnn"), None),
    ]
    settings = types.SimpleNamespace(
        out=tmp_path, warmup=1, steps=2, lr=0.1, seed=0, ddp_timeout=5.0
    )
    launched = []

    def fake_torchrun(command, **kwargs):  # what the ranks would write, without the ranks
        config = json.loads(Path(command[command.index("--config") + 1]).read_text())
        launched.append([job["key"] for job in config["jobs"]])
        result = [{"key": key, "status": "ok", "step_ms_all": [2.0, 4.0]} for key in launched[-1]]
        Path(command[command.index("--result") + 1]).write_text(json.dumps(result))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_torchrun)
    rows = {r["group"]: r for r in bench.run_ddp(9, groups, settings)}
    assert launched == [["mlp"]]
    assert rows["mlp"]["status"] == "ok" and rows["mlp"]["step_ms"] == 3.0
    assert rows["conv"]["status"] == "failed"
    assert rows["conv"]["note"].startswith("global batch 32 too small for 9 processes")
