WRONG_ANSWERS = {
    "tuple-parallel-dict-collate": {
        "calls the forbidden lp.split_batch": """
from torch.utils.data import default_collate


def collate_dicts(items, n):
    if len(items) < n:
        raise ValueError("too few items")
    pieces = lp.split_batch(default_collate(items), n)
    names = [item["name"] for item in items]
    start, out = 0, []
    for piece in pieces:
        out.append({**piece, "name": names[start : start + len(piece["x"])]})
        start += len(piece["x"])
    return tuple(out)
""",
        "splits with chunk's sizes (fewer pieces for short batches)": """
def collate_dicts(items, n):
    if len(items) < n:
        raise ValueError("too few items")
    x = torch.stack([item["x"] for item in items])
    labels = torch.tensor([item["label"] for item in items])
    names = [item["name"] for item in items]
    pieces, start = [], 0
    for x_k, labels_k in zip(x.chunk(n), labels.chunk(n)):
        pieces.append({"x": x_k, "label": labels_k, "name": names[start : start + len(x_k)]})
        start += len(x_k)
    return tuple(pieces)
""",
        "gives every piece all the names": """
def collate_dicts(items, n):
    if len(items) < n:
        raise ValueError("too few items")
    x = torch.stack([item["x"] for item in items])
    labels = torch.tensor([item["label"] for item in items])
    names = [item["name"] for item in items]
    return tuple(
        {"x": x_k, "label": labels_k, "name": names}
        for x_k, labels_k in zip(x.tensor_split(n), labels.tensor_split(n))
    )
""",
    },
    "tuple-parallel-loss": {
        "averages the per-device means": """
def cross_entropy_per_device(outputs, targets, source):
    means = [nn.functional.cross_entropy(o, t).to(source) for o, t in zip(outputs, targets)]
    return torch.stack(means).mean()
""",
        "gathers the logits onto the source device (forbidden torch.cat)": """
def cross_entropy_per_device(outputs, targets, source):
    logits = torch.cat([o.to(source) for o in outputs])
    labels = torch.cat([t.to(source) for t in targets])
    return nn.functional.cross_entropy(logits, labels)
""",
        "copies the whole logits to the source device, piece by piece": """
def cross_entropy_per_device(outputs, targets, source):
    sums = [
        nn.functional.cross_entropy(o.to(source), t.to(source), reduction="sum")
        for o, t in zip(outputs, targets)
    ]
    counts = [(t != -100).sum().to(source) for t in targets]
    return sum(sums) / sum(counts)
""",
        "counts the ignored labels too": """
def cross_entropy_per_device(outputs, targets, source):
    sums = [
        nn.functional.cross_entropy(o, t, reduction="sum").to(source)
        for o, t in zip(outputs, targets)
    ]
    return sum(sums) / sum(len(t) for t in targets)
""",
    },
}
