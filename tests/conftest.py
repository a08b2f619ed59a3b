"""Shared test setup: GPU tests run where there are enough GPUs.

``gpu`` tests need two GPUs; those also marked ``one_gpu`` need only one, so
``pytest -m gpu`` on a one-GPU machine (Colab's) runs them and skips the rest.
"""

import gc

import pytest
import torch

# The run leaves no file in the temporary folder and the reader's _build/ untouched.
from _leftovers import pytest_configure, pytest_sessionfinish  # noqa: F401


def _sim_registered() -> bool:
    """Whether this process has registered the simulated device type with PyTorch."""
    return torch._C._get_privateuse1_backend_name() == "sim"


# Modules that execute chapters, start kernels or processes, or build the book: they run
# before the short tests, so that `--dist worksteal` (pyproject.toml) ends with short tests
# on both workers instead of one worker running a chapter alone at the end. The ones with a
# module-scoped fixture (a bench run, a wheel, the site, a set of ranks) come first: a
# worker runs its queue from the front and gives work away from the back, so each of those
# fixtures is made once.
LONG_FIRST = (
    "tests/experiments/test_bench_cli.py",
    "tests/book/test_standalone.py",
    "tests/ladder/test_distributed.py",
    "tests/ladder/test_torchrun.py",
    "tests/book/test_browser.py",
    "tests/book/test_book.py",
    "tests/classroom/test_grading_attacks.py",
    "tests/classroom/test_grading_tamper.py",
    "tests/classroom/test_grading_sandbox.py",
    "tests/classroom/test_grading_robust.py",
    "tests/book/test_any_hardware.py",
    "tests/classroom/test_classroom.py",
    "tests/lab/test_ladder.py",
    "tests/lab/test_processes.py",
    "tests/book/test_readme.py",
    "tests/test_leftovers.py",
)


def _long_first(item: pytest.Item) -> int:
    path = item.nodeid.partition("::")[0]
    return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)


def pytest_collection_modifyitems(config, items):
    # GPU tests first: once any test has made a simulated device, CUDA's autograd fails
    # for the rest of the process, so a plain `pytest` on a GPU machine runs them first.
    # Sorting is stable: the same order otherwise.
    items.sort(key=lambda item: ("gpu" not in item.keywords, _long_first(item)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "gpu" not in item.keywords:
            continue
        needed = 1 if "one_gpu" in item.keywords else 2
        if gpus < needed:
            item.add_marker(pytest.mark.skip(reason=f"needs at least {needed} CUDA GPU(s)"))


def pytest_collection_finish(session):
    """Where CUDA is available, no test module may make a simulated device while pytest
    imports it.

    Registering the ``sim`` device type breaks CUDA's autograd for the rest of the
    process (an internal assert in the engine), so a module constant such as
    ``torch.device("sim", 0)`` would fail every GPU test of the same run. Make such
    devices on first use (``_training.SimDevices``) or inside the test (the GPU tests
    run before every other test). Without a GPU, importing learn_parallel registers
    ``sim`` itself, and there is no CUDA backward to protect.
    """
    # What is imported and collected by now lives for the whole run: keep it out of every
    # later gc.collect() (the lab collects after each measured run), which would walk it.
    gc.freeze()
    if torch.cuda.is_available() and _sim_registered():
        raise pytest.UsageError(
            "A test module registered the simulated device type while pytest collected the "
            "tests; every CUDA backward of this run would then fail. Make simulated devices "
            "inside the tests or with _training.SimDevices, not at import."
        )


@pytest.fixture(autouse=True)
def _device_kind(request, monkeypatch):
    """GPU tests see the real GPUs; every other test sees the documented default,
    four simulated devices, even on a GPU machine."""
    monkeypatch.delenv("LEARN_PARALLEL_SIMULATED_DEVICES", raising=False)
    if "gpu" in request.keywords:
        if _sim_registered():
            pytest.fail(
                "Simulated devices were registered earlier in this process, and CUDA's "
                "autograd fails after that; run this test with `pytest -m gpu`."
            )
        monkeypatch.delenv("LEARN_PARALLEL_SIMULATE", raising=False)
    else:
        monkeypatch.setenv("LEARN_PARALLEL_SIMULATE", "1")


@pytest.fixture(autouse=True)
def _profiler_forgotten():
    """A test that ran torch.profiler leaves this worker as it found it: the lab refuses to
    time in a process that profiled (learn_parallel.lab.trace), and the next test is a
    process of its own in all but name."""
    from learn_parallel.lab import trace

    before = trace._profiled
    yield
    trace._profiled = before
