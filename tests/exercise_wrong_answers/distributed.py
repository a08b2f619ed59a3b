"""Plausible wrong answers to the DistributedDataParallel chapter's exercises.

``WRONG_ANSWERS[exercise_id]`` lists answers that ``check(exercise_id, answer)``
must reject (each one with an AssertionError).
"""


def sums_without_dividing(grad, all_reduce, world_size):
    all_reduce(grad)


def divides_a_copy(grad, all_reduce, world_size):
    all_reduce(grad)
    return grad / world_size  # the optimizer reads param.grad, which stays the sum


def divides_without_all_reduce(grad, all_reduce, world_size):
    grad.div_(world_size)


def reduces_only_huge_gradients(grad, all_reduce, world_size):
    if grad.sum() > 1e9:  # never true: nobody calls all_reduce
        all_reduce(grad)
    grad.div_(world_size)


def divides_by_world_minus_one(grad, all_reduce, world_size):
    all_reduce(grad)
    grad.div_(world_size - 1 or 1)


def buckets_first_to_last(sizes, cap):
    buckets, current, used = [], [], 0
    for i, size in enumerate(sizes):
        if current and used + size > cap:
            buckets.append(current)
            current, used = [], 0
        current.append(i)
        used += size
    return buckets + [current] if current else buckets


def buckets_overflow_by_one(sizes, cap):
    buckets, current, used = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        used += sizes[i]
        if used >= cap:  # closes after passing the cap, so buckets can exceed it
            buckets.append(current)
            current, used = [], 0
    return buckets + [current] if current else buckets


def one_parameter_per_bucket(sizes, cap):
    return [[i] for i in reversed(range(len(sizes)))]


WRONG_ANSWERS = {
    "ddp-average-hook": [
        sums_without_dividing,
        divides_a_copy,
        divides_without_all_reduce,
        reduces_only_huge_gradients,
        divides_by_world_minus_one,
    ],
    "ddp-buckets": [buckets_first_to_last, buckets_overflow_by_one, one_parameter_per_bucket],
}
