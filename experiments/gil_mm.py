"""Does torch release the GIL around an ATen call? Two threads of ``torch.mm``.

    python experiments/gil_mm.py   (prints one JSON object; CPU only, no GPU needed)

Feeds the ladder chapter (the rung on Python overhead), the performance chapter (why
the GIL matters for DataParallel) and the distributed chapter's opening: what
serialises DataParallel's worker threads is the Python *around* operators
(``Module.__call__``, hooks, argument parsing), not the operators themselves.
Two measurements: the mechanism (`count_while`, independent of machine load) and
the effect on time (`timed`, serial against two threads).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from statistics import median

import torch

SIZE = 768  # one product takes tens of ms on one core


def count_while(work: Callable[[], None]) -> int:
    """Main-thread loop iterations while ``work`` runs in a second thread.

    With the switch interval raised to 2 s a thread that holds the GIL keeps it, so
    the main thread can run Python while the second thread works only if that thread
    released the lock. `main` runs (a) three large matrix products, (b) a pure
    Python loop.
    """
    old = sys.getswitchinterval()
    sys.setswitchinterval(2.0)
    started, done = threading.Event(), threading.Event()

    def body() -> None:
        started.set()
        work()
        done.set()

    thread = threading.Thread(target=body)
    count = 0
    try:
        thread.start()
        started.wait()
        while not done.is_set():
            count += 1
    finally:
        thread.join()
        sys.setswitchinterval(old)
    return count


def timed(threads: int, calls: int, op: Callable[[], object]) -> float:
    """Seconds for ``calls`` calls of ``op`` split evenly over ``threads`` threads.

    `main` runs the same work serially in one thread, then over two threads (one
    intra-op thread each): (a) large products, where nearly all the time is inside
    the ATen call, (b) tiny additions, where most of the time is the Python side of
    the call (argument parsing, dispatch back to Python objects). A ratio near 2 means
    the threads overlapped; near 1 or below, that they took turns. The ratio depends on
    how many cores are free, so the load average and core count are printed with it.
    """

    def work() -> None:
        for _ in range(calls // threads):
            op()

    pool = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(1)  # one core per product, so two threads can use two cores
    a = torch.randn(SIZE, SIZE)
    torch.mm(a, a)  # warm up
    small = torch.ones(16)

    def matmuls() -> None:
        for _ in range(3):
            torch.mm(a, a)

    def python_loop() -> None:
        total = 0
        for i in range(1_000_000):
            total += i

    counts = {
        name: [count_while(work) for _ in range(3)]
        for name, work in (("mm", matmuls), ("python", python_loop))
    }
    repeats = 5
    ops = {"mm": (24, lambda: torch.mm(a, a)), "tiny_add": (200_000, lambda: small.add(small))}
    times: dict[str, dict[str, list[float]]] = {}
    for name, (calls, op) in ops.items():
        serial, two = [], []
        for _ in range(repeats):  # interleaved: serial, then two threads, five times
            serial.append(timed(1, calls, op))
            two.append(timed(2, calls, op))
        times[name] = {"serial_s": serial, "two_threads_s": two}
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "cpu_count": os.cpu_count(),
                "loadavg_before": os.getloadavg(),
                "torch": torch.__version__,
                "main_thread_iterations_while_other_thread_runs": counts,
                "mm_size": SIZE,
                "calls": {name: calls for name, (calls, _) in ops.items()},
                "seconds": {
                    name: {k: [round(v, 4) for v in vs] for k, vs in t.items()}
                    for name, t in times.items()
                },
                "serial_over_two_threads_median": {
                    name: round(median(t["serial_s"]) / median(t["two_threads_s"]), 2)
                    for name, t in times.items()
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
