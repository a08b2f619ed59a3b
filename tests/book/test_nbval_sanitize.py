"""nbval's sanitizer (tests/nbval_sanitize.cfg) makes a timing's stored and fresh text equal.

nbval compares a cell's stored output with a fresh run after applying these regexes to
both; a timing whose digits change but whose padding stays would still differ, so this
checks the text a format width produces as well as the digits.
"""

import configparser
import re

from _book import ROOT


def sanitize(text: str) -> str:
    config = configparser.ConfigParser()
    config.read(ROOT / "tests" / "nbval_sanitize.cfg", encoding="utf-8")
    for section in config.sections():
        text = re.sub(config[section]["regex"], config[section]["replace"], text)
    return text


def test_timings_of_any_width_sanitize_to_the_same_text():
    for start, end in [(5.23, 9.99), (12.5, 1234.56), (0.01, 10.0)]:
        a = f"sim:0   replica backward {start:7.2f} ms -> {end:7.2f} ms"
        b = f"sim:0   replica backward {start * 37:7.2f} ms -> {end * 0.03:7.2f} ms"
        assert sanitize(a) == sanitize(b), (a, b)
    assert sanitize("fresh threads    9.9 ms, µs") == sanitize("fresh threads   10.1 ms, µs")
    assert sanitize("took 3.25 µs") == sanitize("took 120.00 µs")


def test_sanitizer_keeps_what_is_not_a_timing():
    assert sanitize("4 devices: sim:0") == "4 devices: sim:0"
    assert sanitize("ratio 1.35x") == "ratio 1.35x"  # not a timing: compared as is
    assert sanitize("5.23 ms") != sanitize("5.23 MB")


def test_this_machines_bar_ratio_sanitizes_and_nothing_else_of_its_kind():
    """The devices chapter's ratio of this machine's bars varies run to run; the GPUs' do not."""
    assert sanitize("this machine, slowest / fastest: 1.03") == sanitize(
        "this machine, slowest / fastest: 1.18"
    )
    gpus = "slowest / fastest GPU, within each run: 1.39, 1.05"
    assert sanitize(gpus) == gpus
