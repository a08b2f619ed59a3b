"""The README's demo command really runs, reports the split it made, and refuses bad input
in one line."""

import re
import subprocess
import sys
from pathlib import Path

import pytest


def _demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "learn_parallel", "demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_shows_the_split_on_simulated_devices():
    done = _demo("--batch", "10", "--devices", "4")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "A batch of 10 rows was split into 4 pieces (after one warm-up step):" in out
    for rows, device in [("rows   0-2  ", 0), ("rows   3-5  ", 1), ("rows   6-8  ", 2)]:
        assert f"{rows} -> learn_parallel worker sim:{device}" in out
    assert "  row    9     -> learn_parallel worker sim:3" in out  # one row: no "9-9"
    assert "equal to one device: True" in out
    assert "simulated on the CPU" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--devices", "9"],
            "argument --devices: 9 devices asked for, but there are only 4 simulated devices; "
            "set LEARN_PARALLEL_SIMULATED_DEVICES=9 to simulate more",
        ),
        (["--devices", "0"], "argument --devices: must be at least 1, got 0"),
        (["--batch", "ten"], "argument --batch: expected a whole number, got 'ten'"),
        (["--batch", "-3"], "argument --batch: must be at least 1, got -3"),
    ],
)
def test_bad_input_gets_one_line_with_the_fix(args, message, capsys):
    # In this process (a fresh interpreter costs seconds of torch import per case); the
    # command line itself, with its exit status and no traceback, is the first case's.
    if args == ["--devices", "9"]:
        done = _demo(*args)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        from learn_parallel.__main__ import main

        with pytest.raises(SystemExit) as exited:
            main(["demo", *args])
        returncode, (stdout, stderr) = exited.value.code, capsys.readouterr()
    assert returncode == 2
    assert stdout == ""
    assert "Traceback" not in stderr
    usage, error = stderr.strip().splitlines()
    assert usage.startswith("usage: python -m learn_parallel demo")
    assert error == f"python -m learn_parallel demo: error: {message}"


def test_the_readme_shows_what_the_demo_prints():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    sample = re.search(r"```\n\.\.\.\n(A batch of 10 rows.*?)```", readme, re.S).group(1)
    done = _demo()  # the README's command: all (four simulated) devices, batch 10
    assert done.returncode == 0, done.stderr
    timing = re.compile(r"\d+\.\d+ ms")
    printed = [timing.sub("T ms", line) for line in done.stdout.splitlines()]
    lines = [line for line in sample.splitlines() if line.strip() != "..."]
    assert len(lines) >= 3
    for line in lines:
        assert timing.sub("T ms", line) in printed, line
    assert printed.index(lines[0]) > 0  # the model is printed first: the sample's leading "..."
