WRONG_ANSWERS = {
    "scatter-sizes": {
        "calls the forbidden torch.chunk": """
def chunk_sizes(rows, devices):
    return [len(c) for c in torch.arange(rows).chunk(devices)]
""",
        "calls the forbidden Tensor.chunk through torch.chunk's alias": """
from torch import chunk


def chunk_sizes(rows, devices):
    return [len(c) for c in chunk(torch.arange(rows), devices)]
""",
        "calls the forbidden lp.scatter": """
def chunk_sizes(rows, devices):
    return [len(p) for p in lp.scatter(torch.arange(rows), list(range(min(devices, 4))))]
""",
        "spreads the rest over the first pieces (tensor_split's sizes)": """
def chunk_sizes(rows, devices):
    size, rest = divmod(rows, devices)
    sizes = [size + (i < rest) for i in range(devices)]
    return [s for s in sizes if s]
""",
    },
    "scatter-dict": {
        "calls the forbidden lp.scatter": """
def split_batch(batch, ids):
    return lp.scatter(batch, ids)
""",
        "calls the forbidden scatter through an alias": """
from learn_parallel import scatter as my_scatter


def split_batch(batch, ids):
    return my_scatter(batch, ids)
""",
        "never moves the pieces to their devices": """
def split_batch(batch, ids):
    pieces = {k: v.chunk(len(ids)) for k, v in batch.items()}
    count = len(next(iter(pieces.values())))
    return [{k: p[i] for k, p in pieces.items()} for i in range(count)]
""",
        "always makes one piece per device": """
def split_batch(batch, ids):
    devices = [Device(KIND, i).torch_device for i in ids]
    return [
        {k: v.tensor_split(len(ids))[i].to(devices[i]) for k, v in batch.items()}
        for i in range(len(ids))
    ]
""",
    },
}
