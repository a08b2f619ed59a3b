WRONG_ANSWERS = {
    "gather-mean": {
        "averages the replicas' means": """
def batch_mean(losses, rows):
    return losses.mean()
""",
        "weighs by tensor_split's sizes, not chunk's": {
            "min_devices": 3,  # on two devices it is the right answer
            "source": """
def batch_mean(losses, rows):
    sizes = [len(c) for c in torch.arange(rows).tensor_split(len(losses))]
    weights = torch.tensor(sizes, dtype=losses.dtype, device=losses.device)
    return (losses * weights).sum() / rows
""",
        },
    },
    "gather-pairs": {
        "calls the forbidden lp.gather": """
def gather_pairs(outputs, target):
    return lp.gather(outputs, target)
""",
        "joins without copying to the target": """
def gather_pairs(outputs, target):
    return tuple(torch.cat(list(parts)) for parts in zip(*outputs))
""",
        "joins each replica's pair instead of each member": """
def gather_pairs(outputs, target):
    return tuple(torch.cat([part.to(target) for part in pair], 1) for pair in outputs[:2])
""",
    },
}
