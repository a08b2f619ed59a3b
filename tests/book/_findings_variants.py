"""The findings of the variants' chapters (tuple_parallel, options, libtorch_replicate),
checked against their recordings: chapters.json, chain_bench.json, clone.json.

`_claims_variants.CLAIMS` ties each sentence to one of these; the readers they share are in
`_recorded_findings`.
"""

from __future__ import annotations

from _recorded_findings import _each, _recorded

from learn_parallel.lab.spread import compare


def clone_costs_more_host_time() -> bool:
    found = [ms for clone in _each("clone.json") for ms in clone["replicate_host_ms"].values()]
    return bool(found) and all(ms["clone"] > ms["broadcast"] for ms in found)


def clone_step_slower() -> bool:
    """In every clone set, clone's step is slower than broadcast's by the ladder's verdict."""
    from learn_parallel.lab.bridges import verdict

    found = 0
    for clone in _each("clone.json"):
        rows = {(r["workload"], r["rung"]): r for r in clone["rows"]}
        for kind in clone["workloads"]:
            found += 1
            if verdict(rows[kind, "clone"], rows[kind, "broadcast"]) != "slower":
                return False
    return found > 0


def clone_step_not_all_host_time() -> bool:
    """In every clone set and workload, clone's extra step time is more than its extra host
    time of the step: some of it comes after the step returned."""
    found = 0
    for clone in _each("clone.json"):
        rows = {(r["workload"], r["rung"]): r for r in clone["rows"]}
        for kind in clone["workloads"]:
            found += 1
            slow, fast = rows[kind, "clone"], rows[kind, "broadcast"]
            if slow["step_ms"] - fast["step_ms"] <= slow["host_ms"] - fast["host_ms"]:
                return False
    return found > 0


def scattered_chain_faster_and_same() -> bool:
    chain = _recorded().chain_bench
    results = chain["results"] if chain else []
    return bool(results) and all(
        compare(r["scattered_steps_ms"], r["regathered_steps_ms"], "middle") == "faster"
        and r["max_abs_output_difference"] == 0.0
        for r in results
    )


def tuple_parallel_ties() -> bool:
    """A tie at one, two and four devices (round medians' ranges, `compare`), in the run and
    in its repeat."""
    recorded = _recorded()
    for runs in (recorded.measurements, recorded.repeat):
        run = runs.get("tuple_vs_data_parallel")
        if run is None or not run.repeats:
            return False
        pairs = zip(run.repeats["TupleParallel"], run.repeats["DataParallel"])
        verdicts = dict(zip(run.x, (compare(tp, dp) for tp, dp in pairs)))
        if verdicts != {"1": "tie", "2": "tie", "4": "tie"}:
            return False
    return True
