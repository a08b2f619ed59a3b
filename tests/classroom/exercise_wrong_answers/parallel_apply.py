WRONG_ANSWERS = {
    "papply-sequential": {
        "calls the forbidden lp.parallel_apply": """
def sequential_apply(modules, inputs, kwargs_tup=None):
    return lp.parallel_apply(modules, inputs, kwargs_tup)
""",
        "ignores the keyword arguments": """
def sequential_apply(modules, inputs, kwargs_tup=None):
    return [m(*args) for m, args in zip(modules, inputs)]
""",
        "runs the replicas on threads": """
from concurrent.futures import ThreadPoolExecutor


def sequential_apply(modules, inputs, kwargs_tup=None):
    kwargs_tup = kwargs_tup or [{}] * len(modules)
    with ThreadPoolExecutor() as pool:
        jobs = [pool.submit(m, *a, **k) for m, a, k in zip(modules, inputs, kwargs_tup)]
        return [job.result() for job in jobs]
""",
    },
    "papply-which": {
        "reads the device number instead of the replica index": """
import re


def failed_replica(error):
    notes = "\\n".join(getattr(error, "__notes__", []))
    return int(re.search(r"on device \\w+:(\\d+)", notes).group(1))
""",
        "reads only one digit": """
import re


def failed_replica(error):
    notes = "\\n".join(getattr(error, "__notes__", []))
    return int(re.search(r"in replica (\\d)", notes).group(1))
""",
    },
}
