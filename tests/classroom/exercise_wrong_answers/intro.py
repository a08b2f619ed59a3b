WRONG_ANSWERS = {
    "intro-rows": {
        "forgets to clear model.seen": """
def rows_per_replica(dp, batch):
    dp(torch.randn(batch, 3, device=SOURCE), row_ids=torch.arange(batch, device=SOURCE))
    return [len(rows) for rows in sorted(dp.module.seen)]
""",
        "computes the split without running dp": """
def rows_per_replica(dp, batch):
    return [len(c) for c in torch.arange(batch).chunk(len(DEVICES))]
""",
    },
    "intro-many": {
        "only batches smaller than the device count": {
            "min_devices": 3,  # on two devices it is the right answer
            "source": """
def idle_batches(limit):
    return [b for b in range(1, limit + 1) if b < len(DEVICES)]
""",
        },
        "uses tensor_split, which always makes n pieces": """
def idle_batches(limit):
    n = len(DEVICES)
    return [b for b in range(1, limit + 1) if len(torch.arange(b).tensor_split(n)) < n]
""",
    },
}
