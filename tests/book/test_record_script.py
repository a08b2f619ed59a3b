"""The GPU recording script's summary line counts the chapters it was asked to run."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "book" / "data" / "record_gpu_runs.sh"


def _summary(tmp_path: Path, chapters: str | None) -> str:
    """The script's last ``echo`` (the chapters that ran ok, of how many), run from the
    repository root as the script runs it, on a log with two chapters ok."""
    (line,) = [s for s in SCRIPT.read_text().splitlines() if "chapters ok" in s]
    (tmp_path / "notebooks.log").write_text("a.ipynb: ok (1 s)\nb.ipynb: ok (2 s)\n")
    env = {k: v for k, v in os.environ.items() if k != "CHAPTERS"}
    env["logs"] = str(tmp_path)
    if chapters is not None:
        env["CHAPTERS"] = chapters
    done = subprocess.run(
        ["bash", "-c", line.strip()], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_summary_counts_every_chapter_named_in_chapters(tmp_path):
    assert _summary(tmp_path, "scatter.ipynb gather.ipynb") == "2 of 2 chapters ok"


def test_without_chapters_the_summary_counts_every_chapter_of_the_book(tmp_path):
    every = len(list((ROOT / "book").glob("*.ipynb")))
    assert _summary(tmp_path, None) == f"2 of {every} chapters ok"
