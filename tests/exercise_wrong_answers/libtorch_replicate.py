"""Plausible wrong answers to the exercises of book/libtorch_replicate.ipynb.

``WRONG_ANSWERS[exercise_id]`` lists argument tuples for ``check(exercise_id, *args)``;
each must make the check fail.
"""

import torch


def _function(forward, backward):
    return type("Wrong", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})  # fmt: skip


def _keep_source(ctx, source, original, *clones):
    ctx.source = source
    return clones


def _keep_source_copies(ctx, source, original, *clones):
    ctx.source = source
    return tuple(c.clone() for c in clones)


def _sum(ctx, *grads):
    return (None, sum(g.to(ctx.source) for g in grads), *([None] * len(grads)))


def _first_only(ctx, *grads):
    return (None, grads[0].to(ctx.source), *([None] * len(grads)))


def _mean(ctx, *grads):
    return (None, sum(g.to(ctx.source) for g in grads) / len(grads), *([None] * len(grads)))


def _wire(function):
    return lambda source, original, clones: function.apply(source, original, *clones)


def _broadcast_like(source, original, clones):
    return [original.to(c.device, copy=True) for c in clones]


def _equal_values(module):
    return torch.equal(module.encode.weight, module.decode.weight)


def _same_storage(module):
    return module.encode.weight.data_ptr() == module.decode.weight.data_ptr()


WRONG_ANSWERS = {
    "reduce-add-edge": [
        (lambda source, original, clones: list(clones),),  # no edge at all
        (_wire(_function(_keep_source, _first_only)),),  # only replica 0's gradient
        (_wire(_function(_keep_source, _mean)),),  # averages instead of summing
        (_wire(_function(_keep_source_copies, _sum)),),  # returns new copies, not the clones
        (_broadcast_like,),  # Broadcast's idea: copies made here, not the clones wired
    ],
    "tied-weights": [
        ({"broadcast": True, "clone": True, "libtorch": True}, _equal_values),
        ({"broadcast": True, "clone": False, "libtorch": False}, _same_storage),
        ({"broadcast": True, "clone": True, "libtorch": True}, _same_storage),
        ({"broadcast": True, "clone": True}, _same_storage),
    ],
}
