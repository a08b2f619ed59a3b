"""The README's first example runs as pasted, in a fresh interpreter."""

import os
import re
import subprocess
import sys

import torch
from _book import ROOT


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
