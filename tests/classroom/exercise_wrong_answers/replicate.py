WRONG_ANSWERS = {
    "replicate-bytes": {
        "counts replica 0 too": """
def extra_bytes(model, n):
    tensors = [*model.parameters(), *model.buffers()]
    return n * sum(t.numel() * t.element_size() for t in tensors)
""",
        "forgets the buffers": """
def extra_bytes(model, n):
    return (n - 1) * sum(t.numel() * t.element_size() for t in model.parameters())
""",
    },
    "replicate-grads": {
        "computes the gradient on one device, without replicas": """
def manual_grad(model, x):
    model.zero_grad()
    model(x).sum().backward()
    return model[0].weight.grad
""",
        "forgets to clear the old gradient": """
def manual_grad(model, x):
    pieces = lp.scatter(x, DEVICE_IDS)
    replicas = lp.replicate(model, DEVICE_IDS[: len(pieces)])
    sum(r(p).sum().to(SOURCE) for r, p in zip(replicas, pieces)).backward()
    return model[0].weight.grad
""",
        "runs every replica on the whole batch": """
def manual_grad(model, x):
    model.zero_grad()
    pieces = lp.scatter(x, DEVICE_IDS)
    replicas = lp.replicate(model, DEVICE_IDS[: len(pieces)])
    sum(r(x).sum().to(SOURCE) for r in replicas).backward()
    return model[0].weight.grad
""",
    },
    "replicate-floor": {
        "forgets the (N-1) copies: one copy's time": """
def copies_ms(nbytes, n, gb_per_s):
    return nbytes / (gb_per_s * 1e9) * 1e3
""",
        "counts a copy to the first device too": """
def copies_ms(nbytes, n, gb_per_s):
    return n * nbytes / (gb_per_s * 1e9) * 1e3
""",
        "takes the copies to run side by side, each over its own link": """
def copies_ms(nbytes, n, gb_per_s):
    return nbytes / (n - 1) / (gb_per_s * 1e9) * 1e3
""",
        "gives seconds, not milliseconds": """
def copies_ms(nbytes, n, gb_per_s):
    return (n - 1) * nbytes / (gb_per_s * 1e9)
""",
        "reads GB/s as GiB/s": """
def copies_ms(nbytes, n, gb_per_s):
    return (n - 1) * nbytes / (gb_per_s * 2**30) * 1e3
""",
    },
}
