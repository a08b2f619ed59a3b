"""The lab's spread rule: a difference inside the spread is a tie, not a win."""

import pytest

from learn_parallel.lab.spread import Spread, compare


def test_spread_summarises_samples():
    s = Spread.of([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (s.low, s.q1, s.median, s.q3, s.high, s.n) == (1.0, 2.0, 3.0, 4.0, 5.0, 5)
    assert s.band("range") == (1.0, 5.0) and s.band("middle") == (2.0, 4.0)
    assert s.describe("middle") == "median 3.00 ms (2.00-4.00, middle half of 5)"
    assert Spread.of([7.0]).band("middle") == (7.0, 7.0)


def test_describe_prints_the_digits_asked_for():
    """Two decimals can make bands that do not overlap read as touching (0.16-0.16 against
    0.16-0.18); three show the gap the verdict rests on."""
    copies = Spread.of([0.1609, 0.1574, 0.1585, 0.1600, 0.1561])
    coalesced = Spread.of([0.1715, 0.1632, 0.1814, 0.1716, 0.1663])
    assert copies.describe() == "median 0.16 ms (0.16-0.16, range of 5)"
    assert copies.describe(digits=3) == "median 0.159 ms (0.156-0.161, range of 5)"
    assert coalesced.describe(digits=3) == "median 0.172 ms (0.163-0.181, range of 5)"
    assert compare(coalesced, copies) == "slower"


def test_compare_calls_overlap_a_tie():
    assert compare([1.0, 1.1, 1.2], [2.0, 2.1]) == "faster"
    assert compare([2.0, 2.1], [1.0, 1.2]) == "slower"
    # Medians differ (1.1 vs 1.3) but the ranges overlap: a tie, whatever the medians say.
    assert compare([1.0, 1.1, 1.4], [1.2, 1.3, 1.5]) == "tie"
    # One outlier stretches the range; the middle half still separates the two.
    a, b = [1.0, 1.0, 1.0, 1.0, 9.0], [2.0, 2.0, 2.0, 2.0, 2.0]
    assert compare(a, b, "range") == "tie" and compare(a, b, "middle") == "faster"


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="at least one sample"):
        Spread.of([])
    with pytest.raises(ValueError, match="Unknown band 'iqr'"):
        Spread.of([1.0]).band("iqr")


def test_ddp_step_table_calls_a_tie():
    from learn_parallel.lab import ddp_timeline

    def result(steps):
        return {"step_ms": sorted(steps)[2], "step_ms_all": steps}

    report = {
        "label": "test",
        "settings": {"steps": 5},
        "workloads": {
            "mlp": {
                "title": "MLP",
                "parameters": 1e6,
                "ours_over_torch": 1.03,
                "results": {
                    "ours": result([10.0, 10.1, 10.3, 10.4, 10.5]),
                    "torch": result([9.9, 10.0, 10.0, 10.2, 10.3]),  # middle halves overlap
                },
            }
        },
    }
    assert "our DDP / torch's DDP: 1.03, a tie" in ddp_timeline.step_table(report)
    report["workloads"]["mlp"]["results"]["torch"] = result([9.0, 9.1, 9.2, 9.3, 9.4])
    assert "our DDP / torch's DDP: 1.03, ours slower" in ddp_timeline.step_table(report)
