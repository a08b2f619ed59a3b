"""A fresh interpreter that sees only the first GPU, for the one-GPU tests."""

from __future__ import annotations

import os
import subprocess
import sys


def run_with_one_gpu(code: str) -> str:
    """``code`` in a fresh interpreter that sees one GPU and no learn_parallel settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARN_PARALLEL_")}
    env["CUDA_VISIBLE_DEVICES"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout
