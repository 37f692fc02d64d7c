"""GZIP shards read and decoded: TFRecordDataset against TensorFlow's tf.data, same files, same run.

Data: 8 GZIP shards x 25,000 Examples (an int64 label, 16 floats, 50-400 text bytes; ~300 B
each, ~60 MB uncompressed), written with Python's gzip module (level 6, what
tf.io.TFRecordOptions("GZIP") writes), each with its compressed index (`tfrecord-index build`).
Everything runs on one core and from the page cache:

- TensorFlow: tf.data.TFRecordDataset(files, compression_type="GZIP").batch(256)
  .map(tf.io.parse_example), private thread pool of 1, intra/inter-op threads 1 (run under
  --tf-python, a venv with tensorflow-cpu; timed inside that process, start-up excluded);
- ours: TFRecordDataset(batch_size=256) with shuffle=False, "shards" and "block:K", iterated in
  the main process (num_workers=0) with torch.set_num_threads(1).

Rounds are interleaved (every pipeline once per round) because the machine may be shared: the
table gives medians over rounds and ratios against TensorFlow's median of the same run, in wall
time and in CPU time of the process (all its threads; less disturbed by other load). Then
raw inflate throughput of the same files (zlib, ISA-L, zlib-ng, rapidgzip on one thread,
indexed_gzip), to show what bounds the read; and the two seek-point libraries side by side
(rapidgzip, which the library uses, and indexed_gzip): a shard read through once, keeping seek
points 1 MiB apart, then 200 reads of 4 KiB at random places through them.

    python benchmarks/bench_compressed.py --tf-python /tmp/tfvenv/bin/python [--rounds 5]
    python benchmarks/bench_compressed.py --inflate-only   # the last two tables, no TensorFlow
    python benchmarks/bench_compressed.py --plain-install  # with rapidgzip and without it

``--plain-install`` reads the same files with rapidgzip's seek points and with rapidgzip hidden
(a plain install: Python's zlib, checkpoints kept in memory), interleaved: records per second for
each shuffle, and 200 random records (``IndexedTFRecordDataset``) on a fresh dataset.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tensorflow import run_script

import torch_tfrecord as tt

SHARDS = 8
RECORDS = 25_000
BATCH = 256
SPEC = {
    "label": tt.FixedLen((), torch.int64),
    "x": tt.FixedLen((16,), torch.float32),
    "text": tt.FixedLen((), bytes),
}

TF_SCRIPT = """
import sys, time
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
features = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "x": tf.io.FixedLenFeature([16], tf.float32),
    "text": tf.io.FixedLenFeature([], tf.string),
}
options = tf.data.Options()
options.threading.private_threadpool_size = 1
options.threading.max_intra_op_parallelism = 1
ds = (
    tf.data.TFRecordDataset(sys.argv[1:], compression_type="GZIP")
    .batch(256)
    .map(lambda records: tf.io.parse_example(records, features))
    .with_options(options)
)
for batch in ds.take(2):
    pass
start, cpu = time.perf_counter(), time.process_time()
n = 0
for batch in ds:
    n += int(batch["label"].shape[0])
print(n, time.perf_counter() - start, time.process_time() - cpu)
"""


def make_shards(directory: str) -> list[str]:
    rng = np.random.default_rng(0)
    words = np.array([b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"])
    paths = []
    for shard in range(SHARDS):
        path = os.path.join(directory, f"train-{shard:05d}-of-{SHARDS:05d}.tfrecord.gz")
        paths.append(path)
        if os.path.exists(path):
            if not os.path.exists(path + ".cidx"):
                tt.save_compressed_index(tt.build_compressed_index(path), path + ".cidx")
            continue
        plain = path[: -len(".gz")]
        with tt.ExampleWriter(plain) as writer:
            for i in range(RECORDS):
                text = b" ".join(rng.choice(words, int(rng.integers(8, 60))).tolist())
                x = rng.random(16, dtype=np.float32)
                writer.write({"label": shard * RECORDS + i, "x": x, "text": text})
        with open(plain, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(gzip.compress(data, 6))
        os.remove(plain)
        tt.save_compressed_index(tt.build_compressed_index(path), path + ".cidx")
    return paths


def ours(paths: list[str], shuffle: Any) -> tuple[int, float, float]:
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=BATCH, shuffle=shuffle, drop_last=False)
    start, cpu = time.perf_counter(), time.process_time()
    n = sum(len(batch["label"]) for batch in ds)
    return n, time.perf_counter() - start, time.process_time() - cpu


def plain_install_table(paths: list[str], rounds: int) -> None:
    """Records per second with rapidgzip and with it hidden, same files, interleaved rounds."""
    hidden = {"rapidgzip": None}
    shuffles: list[Any] = [False, "shards", "block:1024", "block:8192"]
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for library in ("rapidgzip", "zlib"):
            for shuffle in shuffles:
                with _modules(hidden if library == "zlib" else {}):
                    n, seconds, _ = ours(paths, shuffle)
                times.setdefault((library, str(shuffle)), []).append(n / seconds)
            with _modules(hidden if library == "zlib" else {}):
                indexed = tt.IndexedTFRecordDataset(paths, spec=SPEC)
                picks = np.random.default_rng(0).permutation(len(indexed))[:200].tolist()
                start = time.perf_counter()
                indexed.__getitems__(picks)
                times.setdefault((library, "200 random"), []).append(200 / (time.perf_counter() - start))
    print("| shuffle | rapidgzip (records/s) | zlib only (records/s) | zlib / rapidgzip |")
    print("|---|---|---|---|")
    for shuffle in [*map(str, shuffles), "200 random"]:
        fast = statistics.median(times[("rapidgzip", shuffle)])
        plain = statistics.median(times[("zlib", shuffle)])
        print(f"| {shuffle} | {fast:,.0f} | {plain:,.0f} | {plain / fast:.2f} |")


class _modules:
    """Entries of sys.modules replaced for a while (None hides a module)."""

    def __init__(self, entries: dict[str, Any]) -> None:
        self.entries = entries
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        for name, module in self.entries.items():
            self.saved[name] = sys.modules.get(name)
            sys.modules[name] = module

    def __exit__(self, *exc: object) -> None:
        for name, module in self.saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def tensorflow(tf_python: str, paths: list[str]) -> tuple[int, float, float]:
    n, seconds, cpu = run_script(tf_python, TF_SCRIPT, *paths)
    return int(n), float(seconds), float(cpu)


def inflate_rates(paths: list[str]) -> dict[str, float]:
    """MB/s of uncompressed output, each inflater over all shards once."""
    blobs = []
    for path in paths:
        with open(path, "rb") as f:
            blobs.append(f.read())
    total = sum(len(gzip.decompress(blob)) for blob in blobs[:1]) * len(blobs)

    def stream(module: Any) -> Callable[[], None]:
        def run() -> None:
            for blob in blobs:
                inflater = module.decompressobj(31)
                for at in range(0, len(blob), 1 << 20):
                    inflater.decompress(blob[at : at + (1 << 20)])

        return run

    def rapid() -> None:
        import rapidgzip

        for path in paths:
            with rapidgzip.RapidgzipFile(path, parallelization=1) as f:
                while f.read(1 << 20):
                    pass

    def indexed() -> None:
        import indexed_gzip

        for path in paths:
            with indexed_gzip.IndexedGzipFile(path, spacing=1 << 20) as f:
                while f.read(1 << 20):
                    pass

    candidates: dict[str, Callable[[], None]] = {"zlib": stream(zlib), "rapidgzip (1 thread)": rapid}
    try:
        import indexed_gzip  # noqa: F401
    except ImportError:
        pass
    else:
        candidates["indexed_gzip"] = indexed
    for label, module_name in (("isal", "isal.isal_zlib"), ("zlib-ng", "zlib_ng.zlib_ng")):
        try:
            module = __import__(module_name, fromlist=["decompressobj"])
        except ImportError:
            continue
        candidates[label] = stream(module)
    rates = {}
    for label, run in candidates.items():
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        rates[label] = total / statistics.median(seconds) / 1e6
    return rates


def seek_point_costs(path: str, reads: int = 50) -> dict[str, tuple[float, float]]:
    """Per seek-point library: (seconds to read the shard through once and export seek points
    1 MiB apart; ms to open the shard with those seek points and read 4 KiB at a random place,
    as a reader that jumps to a record does), medians of 3 rounds."""
    with open(path, "rb") as f:
        size = len(gzip.decompress(f.read()))
    places = np.random.default_rng(1).integers(0, size - 4096, reads).tolist()
    index = path + ".bench-seek-points"

    def rapid(with_index: bool) -> Any:
        import rapidgzip

        f = rapidgzip.RapidgzipFile(path, parallelization=1, chunk_size=1 << 20)
        if with_index:
            f.import_index(index)
        return f

    def indexed(with_index: bool) -> Any:
        import indexed_gzip

        return indexed_gzip.IndexedGzipFile(path, spacing=1 << 20, index_file=index if with_index else None)

    results = {}
    for label, open_file in (("rapidgzip (1 thread)", rapid), ("indexed_gzip", indexed)):
        build, seek = [], []
        try:
            for _ in range(3):
                start = time.perf_counter()
                with open_file(False) as f:
                    while f.read(1 << 20):
                        pass
                    f.export_index(index)
                build.append(time.perf_counter() - start)
                start = time.perf_counter()
                for place in places:
                    with open_file(True) as f:
                        f.seek(place)
                        f.read(4096)
                seek.append((time.perf_counter() - start) / reads * 1e3)
        except ImportError:
            continue
        finally:
            if os.path.exists(index):
                os.remove(index)
        results[label] = (statistics.median(build), statistics.median(seek))
    return results


def print_inflate_tables(paths: list[str]) -> None:
    print(f"\n{'inflate, uncompressed output':30} {'MB/s':>8}")
    for label, rate in inflate_rates(paths).items():
        print(f"{label:30} {rate:>8.0f}")
    print(f"\n{'seek points (one shard, 1 MiB apart)':38} {'build s':>8} {'ms per random 4 KiB read':>25}")
    for label, (build, seek) in seek_point_costs(paths[0]).items():
        print(f"{label:38} {build:>8.3f} {seek:>25.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tf-python", default="/tmp/tfvenv/bin/python")
    parser.add_argument("--dir")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inflate-only", action="store_true", help="only the inflate and seek-point tables")
    parser.add_argument("--plain-install", action="store_true", help="rapidgzip against zlib alone")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-gz-")
    os.makedirs(directory, exist_ok=True)
    torch.set_num_threads(1)
    paths = make_shards(directory)
    if args.inflate_only:
        print_inflate_tables(paths)
        return
    if args.plain_install:
        plain_install_table(paths, args.rounds)
        return
    compressed = sum(os.path.getsize(p) for p in paths)
    index_bytes = sum(os.path.getsize(p + ".cidx") for p in paths)
    start = time.perf_counter()
    tt.build_compressed_index(paths[0])
    build_seconds = (time.perf_counter() - start) * len(paths)
    pipelines: dict[str, Callable[[], tuple[int, float, float]]] = {
        "tensorflow tf.data GZIP + parse_example": lambda: tensorflow(args.tf_python, paths),
        "ours shuffle=False": lambda: ours(paths, False),
        'ours shuffle="shards"': lambda: ours(paths, "shards"),
        'ours shuffle="block:1024"': lambda: ours(paths, "block:1024"),
        'ours shuffle="block:8192"': lambda: ours(paths, "block:8192"),
        'ours shuffle="block:65536"': lambda: ours(paths, "block:65536"),
    }
    for run in pipelines.values():  # warm-up: page cache, imports
        run()
    seconds: dict[str, list[float]] = {label: [] for label in pipelines}
    cpu_seconds: dict[str, list[float]] = {label: [] for label in pipelines}
    counts: dict[str, int] = {}
    for _ in range(args.rounds):
        for label, run in pipelines.items():
            n, elapsed, cpu = run()
            counts[label] = n
            seconds[label].append(elapsed)
            cpu_seconds[label].append(cpu)
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    cpu_medians = {label: statistics.median(values) for label, values in cpu_seconds.items()}
    peer = "tensorflow tf.data GZIP + parse_example"
    base = "ours shuffle=False"
    print(
        f"{SHARDS} GZIP shards, {SHARDS * RECORDS:,} records, {compressed / 1e6:.1f} MB compressed; "
        f"compressed indexes {index_bytes / 1e3:.0f} kB, built in ~{build_seconds:.1f} s; "
        f"{args.rounds} interleaved rounds, one core"
    )
    print(
        f"{'pipeline':42} {'records':>8} {'wall s':>7} {'records/s':>10} {'x TF':>5} {'/ False':>7}"
        f" {'CPU s':>6} {'x TF':>5} {'/ False':>7}"
    )
    for label, value in medians.items():
        rate = counts[label] / value
        cpu = cpu_medians[label]
        cpu_ratio = (counts[label] / cpu) / (counts[peer] / cpu_medians[peer])
        print(
            f"{label:42} {counts[label]:>8} {value:>7.3f} {rate:>10,.0f} "
            f"{rate / (counts[peer] / medians[peer]):>5.2f} {value / medians[base]:>7.2f} {cpu:>6.3f} "
            f"{cpu_ratio:>5.2f} {cpu / cpu_medians[base]:>7.2f}"
        )
    print(
        "(medians over rounds; x TF: records/s against TensorFlow's; / False: time against ours "
        "with shuffle=False)"
    )
    print_inflate_tables(paths)


if __name__ == "__main__":
    main()
