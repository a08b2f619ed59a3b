"""The teacher's guide's plot of check times names the devices the checks ran on and the
clock that timed them."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_title_names_the_checks_devices_and_the_host_clock():
    """The checks pick their own devices (`tools.machine`: one device, or one GPU, becomes two
    simulated ones) and are timed with ``time.perf_counter``: the title says so, whatever the
    page's own setup cell found."""
    cells = json.loads((ROOT / "book" / "teaching.ipynb").read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if "ax.set_title(" in "".join(c["source"])]
    assert "time.perf_counter()" in source and "host clock" in source
    title = [
        line
        for line in source.splitlines()
        if line.startswith(("from learn_parallel.classroom.tools import", "checked ="))
    ]
    assert len(title) == 2 and "{checked}" in source, title
    code = "\n".join(
        ["from learn_parallel.lab.timeline import describe_hardware", *title, "print(checked)"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    env.update(LEARN_PARALLEL_SIMULATE="1", LEARN_PARALLEL_SIMULATED_DEVICES="1")
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2 simulated CPU devices (host clock)"
