"""conftest runs the GPU tests first: after any test has made a simulated device, CUDA's
autograd fails for the rest of the process, so a plain `pytest` on a GPU machine would
otherwise fail every GPU test that comes after the CPU ones. After them come the long
tests (conftest.LONG_FIRST), so that the run ends with short tests that the workers can steal
from one another."""

import subprocess
import sys
from pathlib import Path

from conftest import LONG_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_tests_come_first_then_the_long_ones():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/core/test_devices.py", "tests/gpu/test_gpu_simulated.py",
         "tests/book/test_any_hardware.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    gpu = [i for i, node in enumerate(ids) if node.startswith("tests/gpu/")]
    assert gpu and not ids[0].startswith("tests/core/"), ids[:3]
    assert gpu == list(range(len(gpu))), "the GPU tests come first, in their own order"
    rest = [node.partition("::")[0] for node in ids[len(gpu) :]]
    long = [i for i, path in enumerate(rest) if path == "tests/book/test_any_hardware.py"]
    assert long == list(range(len(long))), "the long tests come before the short ones"
    assert len(rest) > len(long), "the short CPU tests still follow"


def test_every_long_test_module_named_exists():
    """A renamed module would silently drop back among the short tests."""
    assert [path for path in LONG_FIRST if not (ROOT / path).is_file()] == []
