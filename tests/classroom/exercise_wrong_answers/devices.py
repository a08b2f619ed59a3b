WRONG_ANSWERS = {
    "devices-imbalance": {
        "looks at memory only": """
def weakest(capacities, threshold=0.75):
    values = [c.total_memory for c in capacities]
    return values.index(min(values)) if min(values) < threshold * max(values) else None
""",
        "compares with the mean, not the largest": """
def weakest(capacities, threshold=0.75):
    for field in ("total_memory", "multi_processor_count"):
        values = [getattr(c, field) for c in capacities]
        if min(values) < threshold * sum(values) / len(values):
            return values.index(min(values))
    return None
""",
    },
    "devices-last-two": {
        "forgets to move the module to its source device": """
def last_two(module):
    return lp.DataParallel(module, device_ids=DEVICE_IDS[-2:], output_device="cpu")
""",
        "leaves the outputs on the first device": """
def last_two(module):
    ids = DEVICE_IDS[-2:]
    module.to(Device(KIND, ids[0]).torch_device)
    return lp.DataParallel(module, device_ids=ids)
""",
        "takes the first two devices": {
            "min_devices": 3,  # on two devices it is the right answer
            "source": """
def last_two(module):
    ids = DEVICE_IDS[:2]
    module.to(Device(KIND, ids[0]).torch_device)
    return lp.DataParallel(module, device_ids=ids, output_device="cpu")
""",
        },
    },
}
