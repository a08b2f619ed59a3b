"""Plausible wrong answers to the DistributedDataParallel chapter's exercises.

``WRONG_ANSWERS[exercise_id]`` maps a label to the source of a replacement for the
exercise's stub cell; ``check(exercise_id, answer)`` must reject each with an AssertionError.
"""

WRONG_ANSWERS = {
    "ddp-average-hook": {
        "sums without dividing": """
def average_gradient(grad, all_reduce, world_size):
    all_reduce(grad)
""",
        "divides a copy": """
def average_gradient(grad, all_reduce, world_size):
    all_reduce(grad)
    return grad / world_size  # the optimizer reads param.grad, which stays the sum
""",
        "divides without all reduce": """
def average_gradient(grad, all_reduce, world_size):
    grad.div_(world_size)
""",
        "reduces only huge gradients": """
def average_gradient(grad, all_reduce, world_size):
    if grad.sum() > 1e9:  # never true: nobody calls all_reduce
        all_reduce(grad)
    grad.div_(world_size)
""",
        "divides by world minus one": """
def average_gradient(grad, all_reduce, world_size):
    all_reduce(grad)
    grad.div_(world_size - 1 or 1)
""",
    },
    "ddp-buckets": {
        "buckets first to last": """
def assign(sizes, cap):
    buckets, current, used = [], [], 0
    for i, size in enumerate(sizes):
        if current and used + size > cap:
            buckets.append(current)
            current, used = [], 0
        current.append(i)
        used += size
    return buckets + [current] if current else buckets
""",
        "buckets overflow by one": """
def assign(sizes, cap):
    buckets, current, used = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        used += sizes[i]
        if used >= cap:  # closes after passing the cap, so buckets can exceed it
            buckets.append(current)
            current, used = [], 0
    return buckets + [current] if current else buckets
""",
        "one parameter per bucket": """
def assign(sizes, cap):
    return [[i] for i in reversed(range(len(sizes)))]
""",
    },
}
