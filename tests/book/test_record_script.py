"""The GPU recording script's summary line counts the chapters it was asked to run, and its
pack (``PACK``) holds each part's shipped files as soon as that part ends."""

import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

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


# A stand-in for torch (two H200s) and for the experiments the script runs: each writes what the
# real one writes, where it writes it (bench: bench.json in --out, its traces next to --trace
# as <stem>-<group>-<implementation>-<devices>.json; measure: chapters.json in --out).
FAKE = {
    "torch/__init__.py": """
        __version__ = "2.11.0+cu130"

        class version:
            cuda = "13.0"

        class cuda:
            device_count = staticmethod(lambda: 2)
            get_device_name = staticmethod(lambda index=0: "NVIDIA H200")
    """,
    "experiments/__init__.py": "",
    "experiments/_fake.py": """
        import argparse
        from pathlib import Path

        def main(name):
            parser = argparse.ArgumentParser()
            parser.add_argument("--out", type=Path)
            parser.add_argument("--trace", type=Path)
            args, _ = parser.parse_known_args()
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / name).write_text("{}")
            print(f"wrote {name}")  # a part that prints nothing fails the script's grep -v
            for implementation in ("learn_parallel", "torch_dp") if args.trace else ():
                trace = args.trace.with_name(f"{args.trace.stem}-conv-{implementation}-2.json")
                trace.write_text("{}")
    """,
    "experiments/bench.py": "from experiments._fake import main\nmain('bench.json')\n",
    "experiments/measure.py": "from experiments._fake import main\nmain('chapters.json')\n",
}


@pytest.mark.parametrize(
    ("part", "shipped"),
    [
        ("bench", ["bench.json"]),
        ("measure", ["chapters.json", "chapters-repeat.json"]),
        ("trace", ["trace-conv-learn_parallel-2.json.gz", "trace-conv-torch_dp-2.json.gz"]),
    ],
)
def test_the_pack_holds_each_parts_shipped_files_when_that_part_is_the_last(
    tmp_path, part, shipped
):
    """bench.json and chapters-repeat.json are copied out of the logs, and the traces gzipped,
    after their part's command: the pack must follow that, or a command cut off after the part
    (or a lane that ends with it) returns them only raw, under logs/."""
    for name, text in FAKE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    env.update(PATH=f"{bin_}{os.pathsep}{env['PATH']}", PARTS=part, PACK="cmd.tgz")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        ["bash", str(SCRIPT), "out"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(tmp_path / "out" / "cmd.tgz") as pack:
        names = {Path(name).as_posix() for name in pack.getnames()}
    assert [f"h200-x2/{name}" for name in shipped if f"h200-x2/{name}" not in names] == []
