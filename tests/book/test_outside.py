"""What a reader meets outside the built site and outside a clone.

* ``classroom.files``: a clone uses its own ``book/`` and track tests; an installed wheel
  its shipped copies; with neither, one sentence says what to fetch. ``python -m
  learn_parallel chapters OUT`` copies the chapters from there and overwrites none.
* tracebacks in the book build's executed chapters name files as imports do
  (``learn_parallel/...``, ``torch/...``), never the machine's absolute paths
  (``book/_ext/short_tracebacks.py``, loaded into every kernel the build starts).
* the ladder plot labels every bar, and says so when a run has no DDP rung.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from learn_parallel.classroom import files

ROOT = Path(__file__).resolve().parents[2]


def test_a_clone_uses_its_own_files():
    assert files.repository() == ROOT
    assert files.book() == ROOT / "book"
    assert files.track_tests().is_file() and files.workflow().is_file()


def test_an_install_uses_the_shipped_copies_or_says_what_to_fetch(monkeypatch, tmp_path):
    installed = tmp_path / "site-packages" / "learn_parallel"
    shipped = installed / "classroom" / "shipped"
    monkeypatch.setattr(files, "PACKAGE", installed)
    monkeypatch.setattr(files, "SHIPPED", shipped)
    with pytest.raises(FileNotFoundError, match=r"has no chapters: install it with `pip install"):
        files.book()
    (shipped / "book").mkdir(parents=True)
    assert files.book() == shipped / "book"
    assert files.track_tests() == shipped / "tests" / "classroom" / "track" / "test_tasks.py"


def test_setup_py_ships_the_chapters_without_outputs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("learn_parallel_setup", ROOT / "setup.py")
    setup = importlib.util.module_from_spec(spec)
    monkey_setup = {"called": False}

    import setuptools

    original = setuptools.setup
    setuptools.setup = lambda **kwargs: monkey_setup.update(called=True, kwargs=kwargs)
    try:
        spec.loader.exec_module(setup)
    finally:
        setuptools.setup = original
    assert monkey_setup["called"]
    stripped = json.loads(setup.without_outputs((ROOT / "book" / "scatter.ipynb").read_text()))
    code = [c for c in stripped["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    for name in setup.FILES:
        assert (ROOT / name).is_file(), name


def _chapters_command(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "learn_parallel", "chapters", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_chapters_command_copies_a_clones_chapters_and_keeps_existing_ones(tmp_path):
    """``python -m learn_parallel chapters OUT`` (the wheel's copies: test_standalone.py)."""
    done = _chapters_command("book", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for chapter in (ROOT / "book").glob("*.ipynb"):
        assert (tmp_path / "book" / chapter.name).read_bytes() == chapter.read_bytes()
    assert _chapters_command(cwd=tmp_path).stdout == f"{ROOT / 'book'}\n"
    (tmp_path / "book" / "scatter.ipynb").write_text("my answers")
    again = _chapters_command("book", cwd=tmp_path)
    assert again.returncode == 2 and again.stdout == ""
    error = again.stderr.strip().splitlines()[-1]
    assert error.startswith("python -m learn_parallel chapters: error: book/")
    others = len(list((ROOT / "book").glob("*.ipynb"))) - 1
    tail = "choose a new folder, or move those away first"
    assert error.endswith(f"(and {others} more chapters); {tail}")
    assert (tmp_path / "book" / "scatter.ipynb").read_text() == "my answers"


def _short_tracebacks():
    """The book build's extension (book/_ext/short_tracebacks.py), imported from its file."""
    import importlib.util

    path = ROOT / "book" / "_ext" / "short_tracebacks.py"
    spec = importlib.util.spec_from_file_location("short_tracebacks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tracebacks_name_files_as_imports_do(capsys):
    import torch
    from IPython.core.interactiveshell import InteractiveShell

    tracebacks = _short_tracebacks()
    assert tracebacks.short_path(Path(torch.__file__)) == "torch/__init__.py"
    replicate = ROOT / "learn_parallel" / "replicate.py"
    assert tracebacks.short_path(replicate) == "learn_parallel/replicate.py"
    assert tracebacks.short_path("/nowhere/else.py") == "/nowhere/else.py"
    shell = InteractiveShell.instance()
    try:
        shell.run_cell("import torch, learn_parallel as lp")
        assert shell.run_cell("lp.scatter(torch.ones(2), [0, 9])").error_in_exec is not None
        before = capsys.readouterr().out
        tracebacks.load_ipython_extension(shell)
        tracebacks.load_ipython_extension(shell)  # a second load changes nothing
        shell.run_cell("lp.scatter(torch.ones(2), [0, 9])")
        after = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    finally:
        InteractiveShell.clear_instance()
    assert str(ROOT) in before  # without the extension IPython prints where the file is
    assert str(ROOT) not in after and "site-packages" not in after
    assert "File learn_parallel/" in after


def test_the_book_build_starts_every_kernel_with_short_tracebacks(monkeypatch):
    """The Sphinx side: every kernel nbclient starts gets the extension, and finds it."""
    import nbformat
    from nbclient import NotebookClient

    trait = NotebookClient.class_traits()["extra_arguments"]
    monkeypatch.setattr(trait, "default_value", trait.default_value)  # undone after the test
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    tracebacks = _short_tracebacks()
    tracebacks.setup(app=None)
    client = NotebookClient(nbformat.v4.new_notebook())
    assert client.extra_arguments == ["--InteractiveShellApp.extensions=short_tracebacks"]
    ext = str(ROOT / "book" / "_ext")
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [ext, "/elsewhere"]
    assert "short_tracebacks" in (ROOT / "_config.yml").read_text()


def test_the_ladder_plot_labels_every_bar_and_names_its_reference():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from learn_parallel.lab import bridges, records

    recorded = records.load_json("ladder.json", "h200-x2")
    kind = next(iter(recorded["workloads"]))
    live = {**recorded, "rows": [r for r in recorded["rows"] if r["rung"] != "ddp"]}
    for report, reference in ((recorded, "DDP's (green bar, dashed line)"), (live, "no DDP")):
        fig = bridges.plot_ladder(report, kind, "test")
        ax = fig.axes[0]
        rows = [r for r in report["rows"] if r["workload"] == kind]
        assert len(ax.texts) == len(rows)  # one label per bar: its ratio, time or status
        assert reference in ax.get_title()
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(dashed) == (reference != "no DDP")
        plt.close(fig)
    ok = [t.get_text() for t in bridges.plot_ladder(live, kind, "t").axes[0].texts]
    assert all(t.endswith(" ms") or not t[0].isdigit() for t in ok)
