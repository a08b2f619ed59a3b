"""The package's command lines refuse bad input in one line and print clean help.

* bad input (a bad ``LEARN_PARALLEL_SIMULATED_DEVICES``, more devices than exist): usage,
  then one ``error:`` line that names the fix; no traceback; exit 2. ``demo --devices 9``
  says what the benchmark says (tests/experiments/test_bench_cli.py): neither silently
  simulates more devices than are set up.
* ``--help`` says in one sentence what the command does, and shows no backticks.
* the classroom's ``track`` outside a clone, with no chapters installed, says what to fetch.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from learn_parallel import __main__ as cli
from learn_parallel.classroom import __main__ as classroom_cli
from learn_parallel.classroom import files

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


def test_too_many_devices_get_one_line(capsys):
    prog = "python -m learn_parallel demo"
    call = lambda: cli.main(["demo", "--devices", "9"])  # noqa: E731
    assert _one_error_line(capsys, call, prog) == TOO_MANY


def test_a_bad_device_count_variable_gets_one_line(capsys, monkeypatch):
    monkeypatch.setenv("LEARN_PARALLEL_SIMULATED_DEVICES", "abc")
    prog = "python -m learn_parallel demo"
    assert _one_error_line(capsys, lambda: cli.main(["demo"]), prog).startswith(BAD_ENV)


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


@pytest.mark.parametrize(
    ("argv", "start", "dots"),
    [
        ([], "A first look at learn_parallel: one DataParallel forward and backward pass", 1),
        # two dots: the sentence's and learn_parallel.DataParallel's
        (["demo"], "Run one learn_parallel.DataParallel forward and backward pass, with no", 2),
    ],
)
def test_help_says_what_it_does_in_one_sentence(capsys, argv, start, dots):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    text = capsys.readouterr().out
    assert "usage: python -m learn_parallel" in text
    assert "`" not in text, [line for line in text.splitlines() if "`" in line]
    description = " ".join(text.split("\n\n")[1].split())
    assert description.startswith(start)
    assert description.count(".") == dots  # one sentence


def test_one_piece_is_singular_and_one_row_is_a_row(capsys):
    cli.main(["demo", "--devices", "1", "--batch", "3"])
    out = capsys.readouterr().out
    assert "A batch of 3 rows was split into 1 piece (after one warm-up step):" in out
    cli.main(["demo", "--devices", "2", "--batch", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("  rows   0-1   -> learn_parallel worker sim:0") for line in lines)
    assert any(line.startswith("  row    2     -> learn_parallel worker sim:1") for line in lines)


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
