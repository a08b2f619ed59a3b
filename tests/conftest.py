"""Shared test setup: GPU tests run only where there are at least two GPUs."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        return
    skip = pytest.mark.skip(reason="needs at least two CUDA GPUs")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _device_kind(request, monkeypatch):
    """GPU tests see the real GPUs; every other test sees the documented default,
    four simulated devices, even on a GPU machine."""
    monkeypatch.delenv("LEARN_PARALLEL_SIMULATED_DEVICES", raising=False)
    if "gpu" in request.keywords:
        monkeypatch.delenv("LEARN_PARALLEL_SIMULATE", raising=False)
    else:
        monkeypatch.setenv("LEARN_PARALLEL_SIMULATE", "1")
