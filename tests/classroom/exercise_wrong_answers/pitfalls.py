_MODEL = """
class CountingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.calls = 0
        self.rows = 0

    def forward(self, x):
        return self.linear(x), torch.tensor([len(x)], device=x.device)
"""

WRONG_ANSWERS = {
    "pitfalls-count": {
        "counts one call per step, not per replica": _MODEL
        + """

def run(wrapped, x):
    out, rows = wrapped(x)
    wrapped.module.calls += 1
    wrapped.module.rows += int(rows.sum())
    return out
""",
        "returns the counts along with the output": _MODEL
        + """

def run(wrapped, x):
    out, rows = wrapped(x)
    wrapped.module.calls += len(rows)
    wrapped.module.rows += int(rows.sum())
    return out, rows
""",
    },
    "pitfalls-groupnorm": {
        "replaces only the top-level layers": """
def replace_batchnorm(module):
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(module, name, nn.GroupNorm(1, child.num_features))
    return module
""",
        "one group per feature (that is InstanceNorm, not what was asked)": """
def replace_batchnorm(module):
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            n = child.num_features
            setattr(module, name, nn.GroupNorm(n, n).to(child.weight.device))
        else:
            replace_batchnorm(child)
    return module
""",
        "takes the device from running_mean, None without running statistics": """
def replace_batchnorm(module):
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            device = child.running_mean.device
            setattr(module, name, nn.GroupNorm(1, child.num_features).to(device))
        else:
            replace_batchnorm(child)
    return module
""",
    },
}
