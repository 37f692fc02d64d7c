"""What a second thread can give on this machine: the same GIL-free work in 1 thread, then split
over 2, for the kinds of native work a batch of Examples is made of.

- ``crc32c, 1 MB``: the native CRC over a 1 MB buffer, called again and again (compute, in cache);
- ``copy 1 MB``: a 1 MB buffer copied into another (a batch's gather, memory in L2/L3);
- ``copy 32 MB``: the same beyond the caches (DRAM bandwidth);
- ``sha256``: pure compute, the control;
- ``batch read, 35 B`` and ``batch decode, 35 B``: the dataset's own native calls for a run of 16
  shuffled batches of 256 small Examples (bench_dataset.py's ``35B`` set, 4,096 ids): the batch
  read (``RecordFiles.read_framed``: the ids ordered, located in the index, copied from the
  files' mappings) and the decode of what it read (``codec.native.decode_framed``). Each is one
  call with the GIL let go for its work: what is left holding it shows as a speed-up short of
  the machine's.

Each thread's buffers are made and touched before the clock starts, and each measure is at least
about 0.1 s of work. The same total work is timed in 1 thread and in 2 threads at once (median of
``--repeats``); the speed-up is what ``threads=2`` can at best get on that part of a batch, whatever
the loader does. Run it beside bench_loader.py when its threads=2 rows fall short of 2x.

    python benchmarks/bench_cores.py --repeats 7 [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np

from torch_tfrecord.codec import native
from torch_tfrecord.records.shards.files import RecordFiles
from torch_tfrecord.support import _native  # type: ignore[attr-defined]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dataset import BATCH, VS_TF_SPECS, make_vs_tf_data

Work = Callable[[], Callable[[], None]]  # makes one thread's buffers, returns the work on them


def _crc(calls: int) -> Work:
    def prepare() -> Callable[[], None]:
        data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()

        def run() -> None:
            for _ in range(calls):
                _native.masked_crc32c(data)

        return run

    return prepare


def _copy(size: int, times: int) -> Work:
    def prepare() -> Callable[[], None]:
        source = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
        target = source.copy()  # (its pages mapped before the clock starts)

        def run() -> None:
            for _ in range(times):
                np.copyto(target, source)

        return run

    return prepare


def _sha(times: int) -> Work:
    def prepare() -> Callable[[], None]:
        data = np.random.default_rng(0).integers(0, 256, 32 << 20, dtype=np.uint8).tobytes()

        def run() -> None:
            for _ in range(times):
                hashlib.sha256(data).digest()

        return run

    return prepare


RUN = 16 * BATCH  # the ids of a run of batches, as a loading thread reads and decodes them


def _run_ids(files: RecordFiles) -> np.ndarray:
    return np.random.default_rng(0).permutation(files.num_records)[:RUN].astype(np.int64)


def _read(paths: list[str], times: int) -> Work:
    def prepare() -> Callable[[], None]:
        files = RecordFiles.from_sources(paths)
        ids, scratch = _run_ids(files), bytearray()
        files.read_framed(ids, scratch)  # (opened, mapped and the buffer grown before the clock)

        def run() -> None:
            for _ in range(times):
                files.read_framed(ids, scratch)

        return run

    return prepare


def _decode(paths: list[str], times: int) -> Work:
    def prepare() -> Callable[[], None]:
        files = RecordFiles.from_sources(paths)
        buffer, starts, sizes = files.read_framed(_run_ids(files))
        spec = VS_TF_SPECS["35B"]

        def run() -> None:
            for _ in range(times):
                native.decode_framed(buffer, starts, sizes, spec, verify_crc=True)

        return run

    return prepare


def work(directory: str) -> dict[str, Work]:
    paths = make_vs_tf_data(directory, "35B")
    return {
        "crc32c, 1 MB": _crc(2048),
        "copy 1 MB": _copy(1 << 20, 4096),
        "copy 32 MB": _copy(32 << 20, 48),
        "sha256": _sha(4),
        "batch read, 35 B": _read(paths, 200),
        "batch decode, 35 B": _decode(paths, 200),
    }


def _timed(prepare: Work, threads: int, per_thread: int) -> float:
    """Seconds for ``threads`` threads each doing ``per_thread`` runs at once."""
    works = [prepare() for _ in range(threads)]

    def run(work: Callable[[], None]) -> None:
        for _ in range(per_thread):
            work()

    started = [threading.Thread(target=run, args=(work,)) for work in works]
    start = time.perf_counter()
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", help="where bench_dataset.py's 35B set is (made there if not)")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    with open("/proc/loadavg") as handle:
        print(f"load average before: {handle.read().strip()}")
    print(f"{'work':<18} {'1 thread s':>11} {'2 threads s':>12} {'speed-up':>9}  (speed-ups of each repeat)")
    for name, prepare in work(directory).items():
        ones, twos = [], []
        for _ in range(args.repeats):  # (alternating: the machine's load moves)
            ones.append(_timed(prepare, 1, 2))
            twos.append(_timed(prepare, 2, 1))
        one, two = statistics.median(ones), statistics.median(twos)
        each = " ".join(f"{a / b:.2f}" for a, b in zip(ones, twos, strict=True))
        print(f"{name:<18} {one:>11.3f} {two:>12.3f} {one / two:>8.2f}x  ({each})")


if __name__ == "__main__":
    main()
