"""The claims on the variants' chapters (tuple_parallel, options, libtorch_replicate; the
ladder's `host` column),
each with its check in `_findings_variants`; the glossary's lines of a torch header are
checked here too, the way libtorch_replicate's are.
"""

from __future__ import annotations

import _findings_variants as findings
from _claim import Claim
from _recorded_findings import _recorded

CLAIMS: list[Claim] = [
    Claim(
        "ladder",
        "on 4 GPUs the host time of every rung but\nthe two whole-step graphs (`step_graphs` "
        "and the reference) is within a tenth of its step",
        findings.ladder_host_near_step_on_four_gpus_only,
        "ladder.json of every machine: host_ms",
    ),
    Claim(
        "ladder",
        "on 2 GPUs every one is further below\nits step",
        findings.ladder_host_near_step_on_four_gpus_only,
        "ladder.json of every machine: host_ms",
    ),
    Claim(
        "options",
        "keeping the feature map scattered was the faster chain at every device\n"
        "count, and gave the same outputs",
        findings.scattered_chain_faster_and_same,
        "chain_bench.json",
    ),
    Claim(
        "options",
        "that\ntrip can add about four fifths of the whole step without it",
        # "About four fifths": the regathered chain's extra time is 75-87.5 % of the kept
        # chain's median step, at every device count.
        lambda: (
            bool(_recorded().chain_bench)
            and all(
                0.75 <= r["regathered_median_ms"] / r["scattered_median_ms"] - 1 < 0.875
                for r in _recorded().chain_bench["results"]
            )
        ),
        "chain_bench.json",
    ),
    Claim(
        "tuple_parallel",
        "TupleParallel's step is a tie with DataParallel's at one, two and four\ndevices (the "
        "ranges of their round medians overlap), in the measurement run again right after\n"
        "(`chapters-repeat.json`) too",
        findings.tuple_parallel_ties,
        "chapters.json and chapters-repeat.json: tuple_vs_data_parallel",
    ),
    Claim(
        "libtorch_replicate",
        "costs more host time per step than\n  filling shallow copies",
        findings.clone_costs_more_host_time,
        "clone.json: replicate_host_ms",
    ),
    Claim(
        "libtorch_replicate",
        "In the recording, clone's step is the slower one (the table's verdicts)",
        findings.clone_step_slower,
        "clone.json: the rows' rounds",
    ),
    Claim(
        "libtorch_replicate",
        "recording the host time of the step is not all of the step's difference, for either\n"
        "workload",
        findings.clone_step_not_all_host_time,
        "clone.json: the rows' step_ms and host_ms",
    ),
    Claim(
        "libtorch_replicate",
        "this chapter's line numbers into\nlibtorch's headers were checked against the copies "
        "the torch 2.13.0 wheel installs",
        lambda: findings.cited_header_lines_hold("libtorch_replicate"),
        "the headers of the installed torch 2.13.0 (torch/include)",
    ),
    Claim(
        "glossary",
        "Read from the files the torch 2.13.0 wheel installs, where a header's cited lines "
        "are one\nfurther down",
        lambda: findings.cited_header_lines_hold("glossary"),
        "the headers of the installed torch 2.13.0 (torch/include)",
    ),
]
