WRONG_ANSWERS = {
    "reduce-add-edge": {
        "wires no edge at all": """
def wire(source, original, clones):
    return list(clones)
""",
        "sends back only replica 0's gradient": """
class FirstOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, source, original, *clones):
        ctx.source = source
        return clones

    @staticmethod
    def backward(ctx, *grads):
        return (None, grads[0].to(ctx.source), *([None] * len(grads)))


def wire(source, original, clones):
    return FirstOnly.apply(source, original, *clones)
""",
        "averages the gradients instead of summing them": """
class Mean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, source, original, *clones):
        ctx.source = source
        return clones

    @staticmethod
    def backward(ctx, *grads):
        total = sum(g.to(ctx.source) for g in grads) / len(grads)
        return (None, total, *([None] * len(grads)))


def wire(source, original, clones):
    return Mean.apply(source, original, *clones)
""",
        "returns new copies, not the clones": """
class Copies(torch.autograd.Function):
    @staticmethod
    def forward(ctx, source, original, *clones):
        ctx.source = source
        return tuple(c.clone() for c in clones)

    @staticmethod
    def backward(ctx, *grads):
        return (None, sum(g.to(ctx.source) for g in grads), *([None] * len(grads)))


def wire(source, original, clones):
    return Copies.apply(source, original, *clones)
""",
        "copies the original again, as Broadcast does, instead of wiring the clones": """
def wire(source, original, clones):
    return [original.to(c.device, copy=True) for c in clones]
""",
        "calls the forbidden ReduceAddEdge": """
def wire(source, original, clones):
    return lp.variants.clone_replicate.ReduceAddEdge.apply(source, original, *clones)
""",
        "subclasses the forbidden ReduceAddEdge": """
from learn_parallel.variants.clone_replicate import ReduceAddEdge


class Mine(ReduceAddEdge):
    pass


def wire(source, original, clones):
    return Mine.apply(source, original, *clones)
""",
    },
    "tied-weights": {
        "calls equal values a tie": """
prediction = {"broadcast": True, "clone": True, "libtorch": True}


def shares_weight(module):
    return torch.equal(module.encode.weight, module.decode.weight)
""",
        "predicts that the clone strategy unties the weights": """
prediction = {"broadcast": True, "clone": False, "libtorch": False}


def shares_weight(module):
    return module.encode.weight.data_ptr() == module.decode.weight.data_ptr()
""",
        "predicts that libtorch's cloning keeps the tie": """
prediction = {"broadcast": True, "clone": True, "libtorch": True}


def shares_weight(module):
    return module.encode.weight.data_ptr() == module.decode.weight.data_ptr()
""",
        "leaves out the libtorch prediction": """
prediction = {"broadcast": True, "clone": True}


def shares_weight(module):
    return module.encode.weight.data_ptr() == module.decode.weight.data_ptr()
""",
    },
}
