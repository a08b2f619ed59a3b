"""conftest runs the GPU tests first: after any test has made a simulated device, CUDA's
autograd fails for the rest of the process, so a plain `pytest` on a GPU machine would
otherwise fail every GPU test that comes after the CPU ones."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_tests_are_ordered_before_the_others():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/core/test_devices.py", "tests/gpu/test_gpu_simulated.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    gpu = [i for i, node in enumerate(ids) if node.startswith("tests/gpu/")]
    assert gpu and not ids[0].startswith("tests/core/"), ids[:3]
    assert gpu == list(range(len(gpu))), "the GPU tests come first, in their own order"
    assert len(ids) > len(gpu), "the CPU tests still follow"
