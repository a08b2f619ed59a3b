"""What the teacher's guide says has changed since its recorded grading run's commit."""

import json
import subprocess
from pathlib import Path

import pytest

from learn_parallel.lab import records

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no git history here: {done.stderr.strip()[:80]}")
    return done.stdout


def _code(text: str) -> list[str]:
    cells = json.loads(text)["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _guide() -> str:
    cells = json.loads((ROOT / "book" / "teaching.ipynb").read_text())["cells"]
    return " ".join(" ".join("".join(c["source"]) for c in cells).split())


def test_the_guide_says_what_changed_since_the_recorded_grading_run():
    commit = records.read_json("grading.json")["commit"]
    guide = _guide()
    assert f"since `{commit}`, the scatter chapter's code has grown" in guide
    # The chapter's code grew, by calls of torch's scatter_kwargs with a mask keyword.
    then = _code(_git("show", f"{commit}:book/scatter.ipynb"))
    now = _code((ROOT / "book" / "scatter.ipynb").read_text())
    new = [cell for cell in now if cell not in then]
    assert new and sum(map(len, now)) > sum(map(len, then))
    assert all("scatter_kwargs" in cell and "mask" in cell for cell in new), new
    # The grader changed in two strings' wording alone: a note of grade's, a track task's hint.
    assert "has changed only in the wording of two strings (a note of `grade`, a track" in guide
    diff = _git("diff", "-U0", commit, "--", "learn_parallel/classroom/")
    files = [line.removeprefix("+++ b/") for line in diff.splitlines() if line.startswith("+++")]
    assert files == ["learn_parallel/classroom/__main__.py", "learn_parallel/classroom/track.py"]
    assert [line.startswith("@@") for line in diff.splitlines()].count(True) == 2, diff
    lines = [
        line
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert all(line[1:].strip().startswith('"') for line in lines), lines
