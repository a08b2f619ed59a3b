"""The exercise checks on real GPUs: every stub and wrong answer fails, every solution
passes, with tensors on distinct devices (where the checks read ``tensor.device``
instead of watching the copies). Needs two GPUs; no Jupyter needed."""

from __future__ import annotations

import pytest
from test_exercises import _cases, run_case

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("chapter", "ex", "kind", "wrong_source"), _cases())
def test_check_on_gpus(chapter, ex, kind, wrong_source):
    run_case(chapter, ex, kind, wrong_source)
