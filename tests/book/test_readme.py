"""The README's first example runs as pasted, in a fresh interpreter; its nbconvert line
executes a notebook without ipykernel's warning about plain TCP; CI runs its commands; the
commit it names for the GPU recordings is theirs."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _book import ROOT

from learn_parallel.lab import provenance


def first_python_block() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_readme_first_example_runs_as_pasted():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    done = subprocess.run(
        [sys.executable, "-c", first_python_block()],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # On a GPU machine the example runs on cuda:0; without GPUs on simulated devices.
    expected = "cuda:0" if torch.cuda.is_available() else "sim:0"
    pattern = rf"loss \d+\.\d{{3}} on {expected}; grad \(5, 20\)\n"
    assert re.fullmatch(pattern, done.stdout), done.stdout


def test_ci_runs_the_readmes_install_line_and_test_command():
    """CI is the README's quick start: the same install line, then the same test command."""
    text = (ROOT / "README.md").read_text()
    quick = re.search(r"Then the two commands:\n\n```bash\n(.*?)```", text, re.S).group(1)
    test_line = [line for line in quick.splitlines() if "# every test" in line][0]
    install, command = (part.strip() for part in test_line.split("#")[0].split("&&"))
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install.replace("pip install", "pip install --quiet") in ci
    assert ci[-1] == command


def test_the_readmes_account_of_ci_and_of_the_test_schedule():
    """`.ci/run` tries the README's `apt-get install` of chromium where it is missing, and the
    tests are scheduled as the README says: xdist's worksteal, GPU tests and long ones first."""
    text = " ".join((ROOT / "README.md").read_text().split())
    ci = (ROOT / ".ci" / "run").read_text()
    assert "after trying that `apt-get install` where `chromium` is missing" in text
    assert "if ! command -v chromium" in ci and "apt-get install -y -qq chromium" in ci
    assert "takes the back half of the longest queue" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    (addopts,) = re.findall(r'^addopts = "(.*)"$', pyproject, re.M)
    assert "--dist worksteal" in addopts
    assert "GPU tests and then the long ones first" in text
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert '("gpu" not in item.keywords, _long_first(item))' in conftest


UNENCRYPTED = "Kernel is running over TCP without encryption"


def _execute(command: list[str], tmp_path: Path) -> str:
    """Run an nbconvert command line on a one-cell notebook in ``tmp_path``; its stderr."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")

    notebook = tmp_path / "one.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")]), notebook)
    command = [str(notebook) if arg.endswith(".ipynb") else arg for arg in command]
    command = [str(tmp_path / "out") if arg == "out" else arg for arg in command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / "out" / "one.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["data"]["text/plain"] == "42"
    return done.stderr


def test_the_readmes_nbconvert_line_runs_a_kernel_without_the_tcp_warning(tmp_path):
    text = (ROOT / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("jupyter nbconvert ")]
    command = shlex.split(line)
    assert "--KernelManager.transport_encryption=auto" in command
    assert UNENCRYPTED not in _execute(command, tmp_path)
    # Without the option ipykernel warns: the README's advice is still needed.
    plain = [arg for arg in command if not arg.startswith("--KernelManager")]
    assert UNENCRYPTED in _execute(plain, tmp_path)


def test_execute_chapters_starts_its_kernels_without_the_tcp_warning(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (Jupyter)")

    notebook = tmp_path / "one.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")]), notebook)
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])\n"
        "import execute_chapters; print(execute_chapters.execute(Path(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "book"), str(notebook)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("one.ipynb: executed in ")
    assert UNENCRYPTED not in done.stderr
    executed = nbformat.read(notebook, as_version=4)
    assert executed.cells[0].outputs[0]["data"]["text/plain"] == "42"


def test_the_readme_names_the_one_commit_of_every_gpu_recording():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Measured on GPUs") :]
    named = re.search(r"from one commit\s+\(`(\w+)`\)", section).group(1)
    gpu = [p for p in provenance.recordings() if p.parent.name != "cpu"]
    assert gpu, "no GPU recordings ship with the package"
    commits = {json.loads(p.read_text()).get("commit", "")[:7] for p in gpu}
    assert commits == {named}, f"the README names {named}; the GPU recordings: {commits}"
