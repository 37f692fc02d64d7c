"""What a second thread can give on this machine: the same GIL-free work in 1 thread, then split
over 2, for the kinds of work a batch of Examples is made of.

- ``crc32c, 1 MB``: the CRC check of a batch of 4 KB records (the native CRC, compute);
- ``copy 1 MB``: a batch of 4 KB records gathered into one buffer (memory bandwidth, in L2/L3);
- ``copy 32 MB``: the same beyond the caches (DRAM bandwidth);
- ``sha256``: pure compute, the control.

Each is timed as the same total work done by 1 thread and by 2 threads at once (median of
``--repeats``); the speed-up is what ``threads=2`` can at best get on that part of a batch, whatever
the loader does. Run it beside bench_loader.py when its threads=2 rows fall short of 2x.

    python benchmarks/bench_cores.py --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np

from torch_tfrecord.support import _native  # type: ignore[attr-defined]


def _work() -> dict[str, Callable[[], None]]:
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, 32 << 20, dtype=np.uint8)
    small = big[: 1 << 20].copy()

    def crc() -> None:
        for _ in range(64):
            _native.masked_crc32c(small)

    def copy(source: np.ndarray, times: int) -> Callable[[], None]:
        def run() -> None:
            target = np.empty_like(source)
            for _ in range(times):
                np.copyto(target, source)

        return run

    def sha() -> None:
        for _ in range(2):
            hashlib.sha256(big).digest()

    return {"crc32c, 1 MB": crc, "copy 1 MB": copy(small, 256), "copy 32 MB": copy(big, 8), "sha256": sha}


def _timed(work: Callable[[], None], threads: int, per_thread: int) -> float:
    def run() -> None:
        for _ in range(per_thread):
            work()

    start = time.perf_counter()
    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        print(f"load average before: {handle.read().strip()}")
    print(f"{'work':<24} {'1 thread s':>11} {'2 threads s':>12} {'speed-up':>9}")
    for name, work in _work().items():
        one = statistics.median(_timed(work, 1, 2) for _ in range(args.repeats))
        two = statistics.median(_timed(work, 2, 1) for _ in range(args.repeats))
        print(f"{name:<24} {one:>11.3f} {two:>12.3f} {one / two:>8.2f}x")


if __name__ == "__main__":
    main()
