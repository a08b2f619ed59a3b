"""The README's demo command really runs and reports the split it made."""

import subprocess
import sys


def test_demo_shows_the_split_on_simulated_devices():
    done = subprocess.run(
        [sys.executable, "-m", "learn_parallel", "demo", "--batch", "10", "--devices", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "A batch of 10 rows was split into 4 pieces:" in out
    for rows, device in [("0-2", 0), ("3-5", 1), ("6-8", 2), ("9-9", 3)]:
        assert f"rows   {rows:<5} -> learn_parallel worker sim:{device}" in out
    assert "equal to one device: True" in out
    assert "simulated on the CPU" in out
