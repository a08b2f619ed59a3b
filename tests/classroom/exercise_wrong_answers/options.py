WRONG_ANSWERS = {
    "options-kept": {
        "runs DataParallel to find out (forbidden)": """
from torch.utils._pytree import tree_leaves, tree_map


def kept_apart(output, keys):
    class Echo(nn.Module):  # returns the given output, sliced like its input
        def forward(self, rows):
            return tree_map(lambda t: t[rows], output)

    rows = torch.arange(len(tree_leaves(output)[0]), device=SOURCE)
    result = lp.OptionsDataParallel(Echo(), except_keywords=keys)(rows)

    def paths(tree, path=()):
        if isinstance(tree, dict):
            return set().union(*(paths(v, path + (k,)) for k, v in tree.items()))
        if isinstance(tree, list):
            return set().union(*(paths(v, path + (i,)) for i, v in enumerate(tree)))
        return {path} if isinstance(tree, tuple) else set()

    return paths(result)
""",
        "keeps only tensors directly under a key, not deeper ones": """
def kept_apart(output, keys, path=()):
    if isinstance(output, dict):
        found = set()
        for k, v in output.items():
            if k in keys and not isinstance(v, (dict, list)):
                found.add(path + (k,))
            else:
                found |= kept_apart(v, keys, path + (k,))
        return found
    if isinstance(output, list):
        return set().union(*(kept_apart(v, keys, path + (i,)) for i, v in enumerate(output)))
    return set()
""",
    },
    "options-loss": {
        "gathers the outputs (forbidden)": """
def per_device_loss(outputs, targets):
    return nn.functional.mse_loss(lp.gather_per_device(outputs, targets.device), targets)
""",
        "averages the per-device means": """
def per_device_loss(outputs, targets):
    slices = targets.split([len(o) for o in outputs])
    means = [nn.functional.mse_loss(o, t.to(o.device)) for o, t in zip(outputs, slices)]
    return sum(m.to(targets.device) for m in means) / len(means)
""",
        "the right value through .item(): no graph back to the outputs": """
def per_device_loss(outputs, targets):
    slices = targets.split([len(o) for o in outputs])
    total = sum(((o - t.to(o.device)) ** 2).sum().item() for o, t in zip(outputs, slices))
    return torch.tensor(total / targets.numel(), device=targets.device)
""",
        "copies every output piece to the targets' device": """
def per_device_loss(outputs, targets):
    slices = targets.split([len(o) for o in outputs])
    sums = [((o.to(targets.device) - t) ** 2).sum() for o, t in zip(outputs, slices)]
    return sum(sums) / targets.numel()
""",
    },
}
