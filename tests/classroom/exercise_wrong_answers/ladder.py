WRONG_ANSWERS = {
    "bucket-plan": {
        "walks the parameters first to last (forward's order)": """
def plan_buckets(sizes, cap):
    buckets, current, size = [], [], 0
    for i, s in enumerate(sizes):
        current.append(i)
        size += s
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])
""",
        "closes a bucket only once it holds more than the cap": """
def plan_buckets(sizes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        size += sizes[i]
        if size > cap:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])
""",
        "drops the last, partly filled bucket": """
def plan_buckets(sizes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        size += sizes[i]
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    return buckets
""",
        "asks the forbidden FastDataParallel for its buckets": """
def plan_buckets(sizes, cap):
    module = nn.Module()
    for i, size in enumerate(sizes):
        module.register_parameter(f"p{i}", nn.Parameter(torch.zeros(size // 4)))
    fast = lp.FastDataParallel(module.to(SOURCE), DEVICES[:2], bucket_mb=cap / 2**20)
    return [bucket.positions for bucket in fast._buckets]
""",
    },
    "refresh-in-place": {
        "rebinds each parameter to new memory": """
def refresh(originals, replica_params, flat):
    for p, o in zip(replica_params, originals):
        p.data = o.detach().to(p.device, copy=True)
""",
        "rebinds the local name flat, so nothing changes": """
def refresh(originals, replica_params, flat):
    flat = torch.cat([o.reshape(-1) for o in originals]).to(flat.device)  # noqa: F841
""",
        "copies with autograd recording (not under torch.no_grad())": """
def refresh(originals, replica_params, flat):
    for p, o in zip(replica_params, originals):
        p.copy_(o)
""",
    },
}
