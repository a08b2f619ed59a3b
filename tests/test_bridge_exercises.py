"""The bridge chapters' checks: the reference solutions pass, every listed wrong answer fails."""

import importlib

import pytest
import torch

from learn_parallel.classroom import check
from learn_parallel.clone_replicate import ReduceAddEdge


def wire(source, original, clones):
    return ReduceAddEdge.apply(source, original, *clones)


def shares_weight(module):
    return module.encode.weight is module.decode.weight


def plan_buckets(sizes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        size += sizes[i]
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def refresh(originals, replica, flat):
    with torch.no_grad():
        flat.copy_(torch.cat([o.reshape(-1) for o in originals]))


SOLUTIONS = {
    "reduce-add-edge": (wire,),
    "tied-weights": ({"broadcast": True, "clone": True, "libtorch": False}, shares_weight),
    "bucket-plan": (plan_buckets,),
    "refresh-in-place": (refresh,),
}
WRONG = {
    **importlib.import_module("exercise_wrong_answers.libtorch_replicate").WRONG_ANSWERS,
    **importlib.import_module("exercise_wrong_answers.ladder").WRONG_ANSWERS,
}


@pytest.mark.parametrize("exercise_id", list(SOLUTIONS))
def test_solution_passes(exercise_id):
    check(exercise_id, *SOLUTIONS[exercise_id])


@pytest.mark.parametrize(
    "exercise_id, index", [(e, i) for e, answers in WRONG.items() for i in range(len(answers))]
)
def test_wrong_answer_fails(exercise_id, index):
    with pytest.raises((AssertionError, RuntimeError)):
        check(exercise_id, *WRONG[exercise_id][index])
