"""The claims on persistent_workers.json, from the performance, ladder and glossary
chapters, each with its check in `_findings_threads`.
"""

from __future__ import annotations

import _findings_threads as findings
from _claim import BENCH, WORKERS, Claim

CLAIMS: list[Claim] = [
    Claim(
        "performance",
        "On ResNet-18 the caller's thread was slower than the persistent threads",
        findings.caller_thread_slower_on_resnet,
        WORKERS,
    ),
    Claim(
        "performance",
        "On the MLP the same recording has the\ncontrol the other way round (the MLP's lines "
        "above): the caller's thread\nwas faster than the persistent threads",
        findings.caller_thread_faster_on_mlp,
        WORKERS,
    ),
    Claim(
        "performance",
        "That many GPUs is the benchmark's\nlargest count, where the benchmark's forward bar is "
        "mostly waiting",
        findings.control_ran_where_the_forward_is_launch_bound,
        WORKERS + " and " + BENCH + ": its learn_parallel timelines",
    ),
    Claim(
        "performance",
        "more than its repeat, below the threshold",
        findings.matmul_first_call_above_its_repeat,
        WORKERS + ": first_call",
    ),
    Claim(
        "performance",
        "its synchronizations fit\n  the trials (the cell below counts them against the "
        "searches), and its `cudaFree` and\n  `cudaMalloc` calls, of which the persistent step "
        "makes none",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "each new thread\n  searches again for every forward convolution shape, timing up to\n"
        "  `torch.backends.cudnn.benchmark_limit` candidate plans (10 by default)",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "A fresh thread per replica made every workload's step slower than persistent threads",
        findings.fresh_threads_cost_most_on_resnet_with_benchmark,
        WORKERS,
    ),
    Claim(
        "performance",
        "the setting whose first calls in a new thread\ncost the most (the convolution's and the "
        "whole forward's lines). With it off, the convolution's\nfirst call still costs more "
        "than later ones, below the threshold, while a whole forward's first\ncall, which meets "
        "every convolution shape, is above it",
        findings.fresh_threads_cost_most_on_resnet_with_benchmark,
        WORKERS + ": runs and first_call",
    ),
    Claim(
        "performance",
        "the same convolution\ncalls, with the same GPU time when `cudnn.benchmark` is off, "
        "cost many times the host time\nwhen they are made from fresh threads",
        findings.fresh_threads_pay_host_time_in_the_convolution,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "With it off (as in this bullet's runs), in the persistent-workers run\n  on 4 GPUs a "
        "whole forward's first call in a new thread, timed alone on 256 rows (a replica's\n  "
        "share of that step: 128), accounts for more than half of the new threads' extra host "
        "time but not all, and the profile finds most of that time\n  inside the convolution "
        "calls",
        findings.whole_forward_probe_accounts_for_most_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "`cudnn.benchmark` on, each new thread searches again for every shape's plan, as often "
        "as the\n  profile below counts",
        findings.benchmark_searches_fit_the_synchronizations,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "with `cudnn.benchmark` on, the probe's cost times the shapes is of the order of the "
        "fresh\nthreads' extra time (below it)",
        findings.probe_accounts_for_under_half_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "With `cudnn.benchmark` off, the same sum\naccounts for less than half of that extra time",
        findings.probe_accounts_for_under_half_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "and the whole forward's first call for more\nthan half of it but not all: a thread alone "
        "pays most of the cost in its first forward, and\nthe profile finds it inside the "
        "convolution calls",
        findings.whole_forward_probe_accounts_for_most_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "The\nwhole forward, timed alone in one new thread, costs less than half of either extra "
        "and less\nthan `conv1`'s sum: `conv1` costs more than the average shape, and the fresh "
        "threads, searching\nat the same time, spent longer per thread in their convolutions "
        "than a lone thread's whole\nfirst forward takes",
        findings.whole_forward_probe_under_half_with_benchmark_on,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "ladder",
        "the performance chapter's one-shape probe (on 256 rows, where a\nreplica's share of "
        "that step is 128), summed over the model's shapes, accounts for less than half of "
        "the new threads' extra host time; a whole ResNet-18\nforward, "
        "probed the same way, pays more than that sum in its first call in a new thread",
        findings.whole_forward_pays_more_than_the_probe_sum,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "ladder",
        "the performance chapter's profile puts nearly all of the fresh threads' extra host time "
        "in the convolution operator's self time (its own code, where the plan is looked up, "
        "the cuDNN calls that build it in a new thread, and any lock waits, which the profile "
        "does not split); its probes of first calls in a new thread (on 256 rows, where a "
        "replica's share of that step is 128) account for part of it, "
        "`conv1` summed over the shapes for under half, a whole forward for more than half but "
        "not all",
        findings.convolution_own_time_holds_nearly_all_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "performance",
        "with the setting off, nearly all of the forwards' extra\nhost time",
        findings.convolution_own_time_holds_nearly_all_with_benchmark_off,
        WORKERS + ": its profile and runs",
    ),
    Claim(
        "performance",
        "The fresh-thread step's extra `cudaFree` calls\ncome to about one per search and GPU",
        findings.frees_come_to_about_one_per_search_and_gpu,
        WORKERS + ": its profile",
    ),
    Claim(
        "performance",
        "Most of the new\n  threads' extra time is spent in the convolution operator itself "
        "(the profiler's self time,\n  which holds the cuDNN calls and any lock waits inside "
        "it), not in the trials'\n  synchronizations nor in the `cudaFree` and `cudaMalloc` "
        "calls",
        findings.benchmark_extra_is_the_operators_own_work,
        WORKERS + ": its profile and runs",
    ),
    Claim(
        "performance",
        "together they took under a tenth of the convolution's extra CPU time, and so did "
        "everything\nthe operator calls (its CPU time minus its own)",
        findings.benchmark_extra_is_the_operators_own_work,
        WORKERS + ": its profile and runs",
    ),
    Claim(
        "performance",
        "persistent-workers run\n  on 4 GPUs a whole forward's first call in a new thread, "
        "timed alone on 256 rows (a replica's\n  share of that step: 128)",
        findings.probes_ran_on_256_rows_against_a_128_row_share,
        WORKERS + ": first_call and hardware",
    ),
    Claim(
        "performance",
        "Each line names\nthe probes' rows, twice one replica's share in the step",
        findings.probes_ran_on_256_rows_against_a_128_row_share,
        WORKERS + ": first_call and hardware",
    ),
    Claim(
        "ladder",
        "(on 256 rows, where a replica's share of that step is 128)",
        findings.probes_ran_on_256_rows_against_a_128_row_share,
        WORKERS + ": first_call and hardware",
    ),
    Claim(
        "performance",
        "The\n  persistent-workers run made new persistent threads for each setting, so with it on "
        "they\n  searched: their step was 1.45x their step with it off",
        findings.new_persistent_threads_stepped_longer_with_the_setting_on,
        WORKERS + ": runs",
    ),
    Claim(
        "performance",
        "the caller's thread, which kept\n  the setting-off plans and searched nothing, was 1.11x "
        "its own",
        findings.new_persistent_threads_stepped_longer_with_the_setting_on,
        WORKERS + ": runs",
    ),
    Claim(
        "performance",
        "Their step was longer with the setting on, the middle halves apart.",
        findings.new_persistent_threads_stepped_longer_with_the_setting_on,
        WORKERS + ": runs",
    ),
    Claim(
        "performance",
        "found their plans and searched nothing: its step was longer too, by less",
        findings.new_persistent_threads_stepped_longer_with_the_setting_on,
        WORKERS + ": runs",
    ),
    Claim(
        "performance",
        "in the profiled step their convolutions took about as much GPU time with the setting on "
        "as\nwith it off",
        findings.searched_plans_took_about_the_same_gpu_time,
        WORKERS + ": its profile",
    ),
    Claim(
        "glossary",
        "With `benchmark` on, a search for every\nconvolution shape in every new thread fits "
        "the extra time it measures for torch's DataParallel",
        # The performance chapter's probe x shapes, over the fresh threads' extra time.
        lambda: all(0.5 < s < 2 for s in findings._probe_shares("on")),
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "glossary",
        "the CUDA calls around the searches (synchronizing, freeing and allocating memory) took "
        "under a\ntenth of it",
        findings.benchmark_extra_is_the_operators_own_work,
        WORKERS + ": its profile and runs",
    ),
    Claim(
        "glossary",
        "one-shape probe (on 256 rows, twice a replica's\nshare), summed over ResNet-18's "
        "convolution shapes, comes to less than half of\nthe new threads' extra host time",
        lambda: all(s < 0.5 for s in findings._probe_shares("off")),
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "glossary",
        "a whole forward's first call in a new thread,\nprobed the same way, comes to more than "
        "half of it but not all",
        findings.whole_forward_probe_accounts_for_most_with_benchmark_off,
        WORKERS + ": first_call, profile and runs",
    ),
    Claim(
        "glossary",
        "the profile\nputs nearly all of it in the convolution operator's own time",
        findings.convolution_own_time_holds_nearly_all_with_benchmark_off,
        WORKERS + ": its profile and runs",
    ),
]
