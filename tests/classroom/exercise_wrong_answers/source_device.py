WRONG_ANSWERS = {
    "source-misplaced": {
        "forgets the buffers": """
def misplaced(module, source):
    named = module.named_parameters()
    return [name for name, tensor in named if tensor.device != source.torch_device]
""",
        "lists the buffers first": """
def misplaced(module, source):
    named = [*module.named_buffers(), *module.named_parameters()]
    return [name for name, tensor in named if tensor.device != source.torch_device]
""",
    },
    "source-materialise": {
        "allocates memory but never initialises it": """
def materialise(dp):
    dp.to_empty(device=dp.src_device.torch_device)
    return dp
""",
        "initialises the weights but leaves them on the meta device": """
def materialise(dp):
    for layer in dp.module.modules():
        if hasattr(layer, "reset_parameters"):
            layer.reset_parameters()
    return dp
""",
    },
}
