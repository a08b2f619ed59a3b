WRONG_ANSWERS = {
    "bucket-plan": {
        "plans all dtypes together, so a bucket mixes dtypes": """
def plan_buckets(sizes, dtypes, cap):
    buckets, current, size = [], [], 0
    for i in reversed(range(len(sizes))):
        if current and size + sizes[i] > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += sizes[i]
    return buckets + [current] if current else buckets
""",
        "walks each dtype's parameters first to last (forward's order)": """
def plan_buckets(sizes, dtypes, cap):
    buckets = []
    for dtype in dict.fromkeys(dtypes):
        current, size = [], 0
        for i in [i for i, d in enumerate(dtypes) if d == dtype]:
            if current and size + sizes[i] > cap:
                buckets.append(current)
                current, size = [], 0
            current.append(i)
            size += sizes[i]
        buckets += [current] if current else []
    return buckets
""",
        "gives positions inside each dtype's group, not in the parameter list": """
def plan_buckets(sizes, dtypes, cap):
    buckets = []
    for dtype in dict.fromkeys(dtypes):
        mine = [s for s, d in zip(sizes, dtypes) if d == dtype]
        current, size = [], 0
        for i in reversed(range(len(mine))):
            if current and size + mine[i] > cap:
                buckets.append(current)
                current, size = [], 0
            current.append(i)
            size += mine[i]
        buckets += [current] if current else []
    return buckets
""",
        "asks the forbidden FastDataParallel for its buckets": """
def plan_buckets(sizes, dtypes, cap):
    module = nn.Module()
    for i, (size, dtype) in enumerate(zip(sizes, dtypes)):
        numel = size // torch.empty(0, dtype=dtype).element_size()
        module.register_parameter(f"p{i}", nn.Parameter(torch.zeros(numel, dtype=dtype)))
    fast = lp.FastDataParallel(module.to(SOURCE), DEVICES[:2], bucket_mb=cap / 2**20)
    return [bucket.positions for bucket in fast.buckets.buckets]
""",
        "calls the package's own plan_buckets": """
from learn_parallel.ladder.buckets import plan_buckets as package_plan


def plan_buckets(sizes, dtypes, cap):
    params = [torch.zeros(s // torch.empty(0, dtype=d).element_size(), dtype=d)
              for s, d in zip(sizes, dtypes)]
    return package_plan(params, cap)
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
    "allreduce-floor": {
        "forgets the ring's 2(N-1)/N: the bytes over the bus bandwidth": """
def all_reduce_ms(nbytes, n, bus_gb_per_s):
    return nbytes / (bus_gb_per_s * 1e9) * 1e3
""",
        "counts (N-1) copies, as replicate's": """
def all_reduce_ms(nbytes, n, bus_gb_per_s):
    return (n - 1) * nbytes / (bus_gb_per_s * 1e9) * 1e3
""",
        "takes 2 for 2(N-1)/N": """
def all_reduce_ms(nbytes, n, bus_gb_per_s):
    return 2 * nbytes / (bus_gb_per_s * 1e9) * 1e3
""",
        "keeps only the reduce-scatter half, (N-1)/N": """
def all_reduce_ms(nbytes, n, bus_gb_per_s):
    return (n - 1) / n * nbytes / (bus_gb_per_s * 1e9) * 1e3
""",
    },
}
