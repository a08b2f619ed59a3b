"""What the teacher's guide says has changed since its recorded grading run's commit."""

import ast
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
    # The chapter's code grew (no cell fewer), among its new cells calls of torch's
    # scatter_kwargs with a mask tensor among the keyword arguments it scatters.
    assert "`scatter_kwargs` with a `mask` tensor in the keyword arguments it scatters" in guide
    then = _code(_git("show", f"{commit}:book/scatter.ipynb"))
    now = _code((ROOT / "book" / "scatter.ipynb").read_text())
    new = [cell for cell in now if cell not in then]
    assert new and len(now) >= len(then) and sum(map(len, now)) > sum(map(len, then))
    assert any("scatter_kwargs(" in cell and '"mask"' in cell for cell in new), new
    # The grader changed in strings alone, each change named in the guide.
    assert "has changed only in strings (a note of `grade`" in guide
    named = {
        "__main__.py": "a note of `grade`",
        "track.py": "a track task's hint",
        "checks/scatter.py": "failure messages of some checks",
        "handouts.py": "the students' README: where its `grade` line runs, and its install line",
        "sample_class.py": "a docstring of the recording script",
    }
    changed = _git("diff", "--name-only", commit, "--", "learn_parallel/classroom/").split()
    changed = [name.removeprefix("learn_parallel/classroom/") for name in changed]
    assert "checks/scatter.py" in changed and "__main__.py" in changed, changed
    for name in changed:
        phrase = named["checks/scatter.py" if name.startswith("checks/") else name]
        assert phrase in guide, name
        then = _git("show", f"{commit}:learn_parallel/classroom/{name}")
        now = (ROOT / "learn_parallel" / "classroom" / name).read_text()
        assert _without_strings(then) == _without_strings(now), name
    assert all(name in changed for name in named), changed
    # One of those strings, the students' install line, now adds the plots extra in the
    # README handouts writes; the workflow it copies, outside the grader, named apart.
    assert "which now adds the plots extra), the Classroom workflow (`.github/classroom/`" in guide
    for path in ("learn_parallel/classroom/handouts.py", ".github/classroom/autograde.yml"):
        then, now = _git("show", f"{commit}:{path}"), (ROOT / path).read_text()
        assert "pip install ./_package " in then and "./_package " not in now, path
        assert 'pip install "./_package[plots]" ' in now, path


def _without_strings(source: str) -> str:
    """The module's syntax tree with every string, f-strings whole, replaced by an empty one."""

    class Blank(ast.NodeTransformer):
        def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.Constant:
            return ast.Constant("")

        def visit_Constant(self, node: ast.Constant) -> ast.Constant:
            return ast.Constant("") if isinstance(node.value, str) else node

    return ast.dump(Blank().visit(ast.parse(source)))


def test_the_load_note_says_which_average_reached_the_line_with_the_digits_to_see_it():
    """Near saturation where the 1- or the 5-minute load average per core reaches 0.9, named,
    with per-core values printed finely enough to show a value just under the line."""
    cells = json.loads((ROOT / "book" / "teaching.ipynb").read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if "def load_note" in "".join(c["source"])]
    names: dict = {}
    exec(source[: source.index("recording = records")], names)
    note = names["load_note"]
    just_under = note([3684 / 2048, 3.36, 3.13], 2, 8.0, "here")  # 1.7988: shown as 1.80
    assert "1-minute 0.899, 5-minute 1.680" in just_under
    assert "the 5-minute average reaches it: near saturation" in just_under
    assert "the 1-minute average reaches it" in note([1.9, 1.6, 0.0], 2, 8.0, "here")
    assert "1- and 5-minute averages reach it" in note([1.92, 2.07, 2.98], 2, 16.3, "there")
    assert "neither reaches it" in note([1.79, 1.79, 9.0], 2, 8.0, "here")
    # the recorded run's stored output is the note on its recorded load
    recording = records.read_json("grading.json")
    before, cores = recording["machine"]["load_average_before"], recording["machine"]["cores"]
    (cell,) = [c for c in cells if "def load_note" in "".join(c["source"])]
    shown = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    assert note(before, cores, recording["seconds"], "there") in shown
