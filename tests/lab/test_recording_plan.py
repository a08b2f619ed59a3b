"""The one recording script records what the chapters read, on any GPU count, and the
chapters find each recording by itself.

What these prove: every part the script's header lists runs, each with every GPU it sees
(no part is fixed to two GPUs); the performance chapter's command records every file that
chapter reads; a recording made on other GPUs (``h100-x4`` instead of ``h200-x4``) is found
without a code change, the folder with the most GPUs first, and a missing one is one line.
"""

from __future__ import annotations

import json
import re

from _book import BOOK, ROOT

from learn_parallel.lab import measure, records

SCRIPT = (ROOT / "book" / "data" / "record_gpu_runs.sh").read_text()
# What each part writes into the machine's folder (the drivers name their files).
PART_FILES = {
    "floors": ["floors.json"],
    "measure": ["chapters.json", "chapters-repeat.json"],
    "chain": ["chain_bench.json"],
    "bench": ["bench.json"],
    "ladder": ["ladder.json"],
    "clone": ["clone.json"],
    "ddp": ["distributed.json"],
    "workers": ["persistent_workers.json"],
    "timeline": ["timeline_check.json"],
    "recorder": ["recorder_cost.json"],
    "gatherprobe": ["gather_probe.json"],
    "trace": ["trace-"],
    "profilertax": ["profiler_tax.json"],
}


def test_every_part_runs_on_every_gpu_it_sees():
    header = "\n".join(line for line in SCRIPT.splitlines() if line.startswith("#"))
    for part in [*PART_FILES, "tests", "notebooks"]:
        assert re.search(rf"#\s.*\b{part}\s", header), f"the header does not list {part}"
        assert f"has {part}" in SCRIPT, f"no code runs part {part}"
    assert not re.search(r"--(devices|world) [0-9]", SCRIPT), "a part fixed to a GPU count"


def _reads(chapter: str) -> set[str]:
    """The recorded files a chapter's code reads."""
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    # records.load_json, records.read_json and records.machines each name the file they read
    found = set(re.findall(r'(?:load_json|read_json|machines)\("([\w-]+\.json)"', code))
    found |= {"bench.json"} if "RECORDED.bench" in code else set()
    found |= {"chapters.json"} if re.search(r"RECORDED\.(measurement|timeline)", code) else set()
    found |= {"chapters-repeat.json"} if "RECORDED.repeat" in code else set()
    found |= {"floors.json"} if "floors.load(" in code else set()
    return found | ({"trace-"} if '"trace-' in code else set())


def test_the_performance_chapters_command_records_all_it_reads():
    markdown = json.loads((BOOK / "performance.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in markdown if c["cell_type"] == "markdown")
    (parts,) = re.findall(r'PARTS="([^"]+)" bash book/data/record_gpu_runs.sh', text)
    recorded = {f for part in parts.split() for f in PART_FILES[part]}
    assert _reads("performance") - recorded == set()
    read = _reads("performance")
    assert {"bench.json", "clone.json", "floors.json", "trace-", "ladder.json"} <= read
    assert {"profiler_tax.json", "recorder_cost.json", "persistent_workers.json"} <= read


def _part_commands(part: str) -> str:
    """The script's lines that run ``part`` (with their continuation lines, and the body of
    an ``if has part`` block)."""
    lines, taken, block = SCRIPT.splitlines(), [], False
    for i, line in enumerate(lines):
        if line.startswith(f"if has {part};"):
            block = True
        follows = bool(taken) and taken[-1] == lines[i - 1] and lines[i - 1].endswith("\\")
        if block or line.startswith(f"has {part} ") or follows:
            taken.append(line)
        if block and line.strip() == "fi":
            block = False
    return "\n".join(taken)


def test_each_part_writes_the_files_the_table_above_gives_it():
    """PART_FILES is typed here: each file must be named by the part's own lines of the script
    or by the driver they run (``python -m experiments.X``), where the driver names its file."""
    for part, files in PART_FILES.items():
        commands = _part_commands(part)
        assert commands, f"record_gpu_runs.sh has no lines for part {part}"
        drivers = re.findall(r"python -m (experiments\.\w+)", commands)
        sources = [(ROOT / (d.replace(".", "/") + ".py")).read_text() for d in drivers]
        for name in files:
            assert any(name in text for text in [commands, *sources]), (
                f"part {part}: neither its lines of record_gpu_runs.sh nor {drivers} name {name}"
            )


def _record(folder, name, date="2026-01-01"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"date": date}))


def test_a_recording_on_other_gpus_drops_in(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(records.DATA_ENV, str(tmp_path))
    _record(tmp_path / "h100-x2", "ladder.json")
    _record(tmp_path / "h100-x2", "clone.json")
    _record(tmp_path / "h100-x4", "ladder.json")
    _record(tmp_path / "h100-x8", "ladder.json", date="2025-01-01")
    assert records.machines() == ["h100-x2", "h100-x4", "h100-x8"]
    assert records.machines("clone.json") == ["h100-x2"]
    assert records.machine_for("clone.json") == "h100-x2"
    assert records.machine_for("ladder.json") == "h100-x8"  # the most GPUs, then the newest
    assert records.machine_for("nothing.json") is None
    assert records.load_json("nothing.json") is None
    assert "No recorded nothing.json for any recorded machine" in capsys.readouterr().out


def test_the_chapters_read_the_machine_the_data_names(tmp_path, monkeypatch):
    machine = records.machine_for("chapters.json")
    source = records.recorded_root() / machine
    for name in ("chapters.json", "bench.json", "chain_bench.json", "chapters-repeat.json"):
        (tmp_path / "h100-x4").mkdir(exist_ok=True)
        (tmp_path / "h100-x4" / name).write_text((source / name).read_text())
    monkeypatch.setenv(records.DATA_ENV, str(tmp_path))
    recorded = measure.load_recorded()
    assert recorded.machine == "h100-x4" and recorded.source == str(tmp_path / "h100-x4")
    assert recorded.hardware == records.read_json("chapters.json")["hardware"].split(" (")[0]


def test_the_plan_the_teaching_chapter_points_to_gives_a_verdict_its_rounds():
    """The teaching chapter sends a re-recording to the data README's plan, and that plan
    runs the profiler tax and torchrun for the rounds a verdict needs, torchrun at one count."""
    from learn_parallel.lab.bridges import ENOUGH_ROUNDS

    cells = json.loads((BOOK / "teaching.ipynb").read_text())["cells"]
    guide = " ".join(" ".join("".join(c["source"]) for c in cells).split())
    assert "`book/data/README.md` (*Recording again*)" in guide
    readme = (BOOK / "data" / "README.md").read_text()
    plan = readme[readme.index("## Recording again") :]
    plan = plan[plan.index("```bash") : plan.index("```", plan.index("```bash") + 3)]
    (rounds,) = re.findall(r'PROFILERTAX_ARGS="--rounds (\d+)"', plan)
    assert int(rounds) >= ENOUGH_ROUNDS
    (counts, repeats) = re.findall(r'TORCHRUN_ARGS="--counts (\d+) --repeats (\d+)"', plan)[0]
    assert int(repeats) >= ENOUGH_ROUNDS and "," not in counts
    # the guide names the same settings
    assert f'PROFILERTAX_ARGS="--rounds {rounds}"' in guide
    assert f'TORCHRUN_ARGS="--counts {counts} --repeats {repeats}"' in guide
