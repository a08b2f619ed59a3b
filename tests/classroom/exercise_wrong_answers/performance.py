WRONG_ANSWERS = {
    "perf-efficiency": {
        "compares with the implementation's own one-device run": """
def efficiency(rows, impl):
    mine = [r for r in rows if r["implementation"] == impl and r["status"] == "ok"]
    one = next(r["samples_per_s"] for r in mine if r["devices"] == 1)
    return {r["devices"]: r["samples_per_s"] / (r["devices"] * one) for r in mine}
""",
        "keeps failed rows": """
def efficiency(rows, impl):
    one = next(r["samples_per_s"] for r in rows if r["implementation"] == "single")
    return {
        r["devices"]: (r["samples_per_s"] or 0) / (r["devices"] * one)
        for r in rows
        if r["implementation"] == impl
    }
""",
    },
    "perf-forward-share": {
        "divides by the sum of the phases, not the step's span": """
def forward_share(timeline, row):
    last = timeline.steps()[-1]
    mine = [r for r in timeline.records if r.device == row and r.step == last]
    total = sum(r.duration_ms for r in mine)
    return sum(r.duration_ms for r in mine if r.phase == "forward") / total
""",
        "uses every step, not the last": """
def forward_share(timeline, row):
    mine = [r for r in timeline.records if r.device == row]
    span = max(r.end_ms for r in mine) - min(r.start_ms for r in mine)
    return sum(r.duration_ms for r in mine if r.phase == "forward") / span
""",
    },
}
