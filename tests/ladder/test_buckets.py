"""The one bucket planner and `Bucket`, shared by the minimal DDP, FastDataParallel and
ReplicatedStep: DDP's rule (last parameter first, a bucket closed at the cap, an oversized
parameter alone), applied to each dtype on its own; buckets listed in the order they close."""

import torch

from learn_parallel.ladder.buckets import Bucket, plan_buckets


def params(*sizes, dtype=torch.uint8):
    """Tensors of ``sizes`` bytes each (one byte an element for uint8)."""
    return [torch.empty(size, dtype=dtype) for size in sizes]


def test_buckets_are_filled_from_the_last_parameter():
    assert plan_buckets(params(4, 4, 4, 4), cap_bytes=8) == [[3, 2], [1, 0]]
    assert plan_buckets(params(4, 100, 4), cap_bytes=8) == [[2], [1], [0]]  # too big: alone
    assert plan_buckets(params(1, 2, 3), cap_bytes=100) == [[2, 1, 0]]
    assert plan_buckets([], cap_bytes=8) == []


def test_each_dtype_fills_buckets_of_its_own_in_closing_order():
    doubles = params(5, 1, 1, dtype=torch.float64)  # 40, 8, 8 bytes
    floats = params(2, 2, dtype=torch.float32)  # 8, 8 bytes
    mixed = [doubles[0], floats[0], doubles[1], floats[1], doubles[2]]
    # float64 from the last: 8 + 8, then 40 does not fit (closes [4, 2]); float32: 8 + 8.
    assert plan_buckets(mixed, cap_bytes=20) == [[4, 2], [3, 1], [0]]
    for bucket in plan_buckets(mixed, cap_bytes=20):
        assert len({mixed[i].dtype for i in bucket}) == 1


def test_a_bucket_is_complete_when_every_replica_sent_every_gradient_and_resets():
    bucket = Bucket(0, [3, 2], streams=[None, None])
    bucket.arrived = 2  # both gradients of one replica
    assert bucket.complete() and not bucket.complete(replicas=2)
    bucket.arrived, bucket.launched, bucket.work = 4, True, object()
    assert bucket.complete(replicas=2)
    bucket.reset()
    assert (bucket.arrived, bucket.launched, bucket.work, bucket.streams) == (
        0,
        False,
        None,
        [None] * 2,
    )
