"""The package's two floors: the core never loads the lab, and modules share no private names."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "learn_parallel"


def test_importing_the_package_loads_only_core_modules():
    code = (
        "import learn_parallel, sys; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('learn_parallel')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert "learn_parallel.data_parallel" in loaded  # the probe did import the core
    extra = [m for m in loaded if m.startswith(("learn_parallel.lab", "learn_parallel.classroom"))]
    assert extra == [], f"importing learn_parallel loaded {extra}"


def test_core_modules_import_no_private_names_from_each_other():
    offenders = []
    folders = ("variants", "ladder", "sim")
    taught = [*PACKAGE.glob("*.py"), *(p for f in folders for p in PACKAGE.glob(f"{f}/*.py"))]
    for path in sorted(taught):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "learn_parallel"
            ):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    offenders.append(f"{path.name}: from {node.module} import {private}")
    assert offenders == []
