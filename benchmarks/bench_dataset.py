"""DataLoader throughput of TFRecordDataset against the `tfrecord` package's DataLoader, same run.

Datasets: those of bench_decode.py (8 shards x 20,000 Examples, ~50 B and ~4 KB), read from the
page cache (one warm-up pass first). Every pipeline yields batches of 256 decoded tensors:

- ours, batch mode: TFRecordDataset(batch_size=256) + DataLoader(batch_size=None);
- ours, sample mode: TFRecordDataset() + DataLoader(batch_size=256, collate_fn=tt.collate);
- the `tfrecord` package: one tfrecord.torch.TFRecordDataset per shard (with its index, so
  workers split the records), chained, + DataLoader(batch_size=256) (its default collate).

Each with num_workers 0, 1 and 2; ours with shuffle="global", "shards" and False (to price the
global shuffle), with the native decoder, and once with the protobuf decoder for comparison.
Then peak RSS of one epoch (batch mode, 2 workers) over 160,000 and 1,600,000 records (the small
shards hard-linked 10 times), main process and workers.

    python benchmarks/bench_dataset.py [--dir DIR] [--repeats 3]

``--tf-python PYTHON`` (a Python with TensorFlow, e.g. /tmp/tfvenv/bin/python) prints instead the
table against TensorFlow: 4 shards x 20,000 Examples of ~35 bytes {label: int64, score: float}
and of ~4 KB {data: 4,096 bytes, label: int64, floats: 16 floats}; ours
``TFRecordDataset(batch_size=256)`` through ``DataLoader(batch_size=None)`` (construction
included) in file order and with ``shuffle="global"``, with 0, 1 and 2 workers, and with
``shuffle="block:1024"`` and ``"block:8192"`` in the main process (``--workers-only``: file
order with 0 and 2 workers, global shuffle with 2); TensorFlow two ways, each in a process that
stays up: serial, ``TFRecordDataset(paths).batch(256).map(parse_example)`` with one intra- and
one inter-op thread, and AUTOTUNE, its default threads and its documented fast path
(``num_parallel_reads``, ``num_parallel_calls`` and ``prefetch``, all AUTOTUNE). Every round
times each pipeline back to back: one warm-up round, then ``--repeats`` rounds, medians, ratios
to the faster TensorFlow pipeline of the run. Also the CPU milliseconds per batch of 256 in the
main process (all its threads; TensorFlow's process for its rows) and in the DataLoader workers
(together), which a machine loaded by others disturbs less than wall time.

    python benchmarks/bench_dataset.py --tf-python /tmp/tfvenv/bin/python [--workers-only] [--dir DIR]

``--telemetry`` prints instead what the load telemetry (``dataset.stats()``) costs: rows of ours
timed with it on and off (``TORCH_TFRECORD_TELEMETRY=0``), alternately in each round (which goes
first alternates too), one warm-up round and ``--repeats`` rounds; records/s on and off (medians),
the overhead as the median of each round's ratio, and the CPU milliseconds per batch of the main
process and the workers together, on and off; first, the telemetry's own CPU per batch and per
sample, on and off, timed in a loop (what a loaded machine's wall times cannot resolve).

    python benchmarks/bench_dataset.py --telemetry [--repeats 9] [--dir DIR]

``--select`` prints instead what reading a selection costs (issue 46): ours in batch mode through
``DataLoader(batch_size=None)`` (construction included, as above), file order and global shuffle,
0 and 2 workers, three ways in each round (their order turning round by round): the whole
dataset, a random half of it (``subset=0.5``) and an epoch of the whole as long as the half
(``samples_per_epoch=80_000``: the same fixed costs, worker start-up included). Records/s
(medians), and the selection's rate over each of the other two (the median of the rounds'
ratios); one warm-up round, then ``--repeats`` rounds.

    python benchmarks/bench_dataset.py --select [--repeats 9] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch.utils.data import ChainDataset, DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_decode import SPECS, TFRECORD_DESCRIPTIONS, make_dataset

import torch_tfrecord as tt

BATCH = 256
WORKERS = (0, 1, 2)


def count(loader: Iterable[dict[str, Any]]) -> int:
    return sum(len(batch["label"]) for batch in loader)


def ours_batches(paths: list[str], name: str, workers: int, shuffle: Any) -> int:
    ds = tt.TFRecordDataset(paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle, drop_last=False)
    return count(DataLoader(ds, batch_size=None, num_workers=workers))


def ours_samples(paths: list[str], name: str, workers: int, shuffle: Any) -> int:
    ds = tt.TFRecordDataset(paths, spec=SPECS[name], shuffle=shuffle, drop_last=False)
    return count(DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=tt.collate))


def tfrecord_package(paths: list[str], name: str, workers: int) -> int:
    from tfrecord.torch.dataset import TFRecordDataset

    shards = ChainDataset(
        [TFRecordDataset(path, tt.default_index_path(path), TFRECORD_DESCRIPTIONS[name]) for path in paths]
    )
    return count(DataLoader(shards, batch_size=BATCH, num_workers=workers))


def timed(function: Callable[[], int], repeats: int) -> tuple[float, int]:
    seconds, n = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        n = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), n


_RSS_SCRIPT = """
import json, resource, sys, torch
from torch.utils.data import DataLoader
import torch_tfrecord as tt
torch.set_num_threads(1)
spec = {"label": tt.FixedLen((), torch.int64), "id": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((4,), torch.float32)}
ds = tt.TFRecordDataset(sys.argv[1], spec=spec, batch_size=256)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(len(b["label"]) for b in DataLoader(ds, batch_size=None, num_workers=2))
print(json.dumps({"records": ds.num_records, "seen": n, "main_after_index_kb": before,
                  "main_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def peak_rss(directory: str, small: list[str]) -> list[dict[str, int]]:
    results = []
    for copies in (1, 10):
        folder = os.path.join(directory, f"rss-{copies}")
        os.makedirs(folder, exist_ok=True)
        for copy in range(copies):
            for path in small:
                for suffix in ("", ".idx"):
                    target = os.path.join(folder, f"c{copy:02d}-{os.path.basename(path)}{suffix}")
                    if not os.path.exists(target):
                        os.link(path + suffix, target)
        out = subprocess.run(
            [sys.executable, "-c", _RSS_SCRIPT, os.path.join(folder, "*.tfrecord")],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(out.stdout))
    return results


VS_TF_SPECS = {
    "35B": {"label": tt.FixedLen((), torch.int64), "score": tt.FixedLen((), torch.float32)},
    "4KB": {
        "data": tt.FixedLen((), bytes),
        "label": tt.FixedLen((), torch.int64),
        "floats": tt.FixedLen((16,), torch.float32),
    },
}
_VS_TF_PARSE = {
    "35B": "{'label': tf.io.FixedLenFeature([], tf.int64), 'score': tf.io.FixedLenFeature([], tf.float32)}",
    "4KB": "{'data': tf.io.FixedLenFeature([], tf.string), 'label': tf.io.FixedLenFeature([], tf.int64),"
    " 'floats': tf.io.FixedLenFeature([16], tf.float32)}",
}
# Stays up: each line on stdin names a data set; it answers with records and seconds of one pass.
# argv[3] "serial": one intra- and one inter-op thread, the plain pipeline; "autotune": TensorFlow's
# default threads and its documented fast path (parallel reads and map, prefetch, all AUTOTUNE).
_TF_SERVER = """
import sys, time
import tensorflow as tf
serial = sys.argv[3] == "serial"
if serial:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
specs = {name: eval(text) for name, text in eval(sys.argv[1]).items()}
paths = eval(sys.argv[2])
auto = tf.data.AUTOTUNE
for line in sys.stdin:
    name = line.strip()
    start, cpu = time.perf_counter(), time.process_time()
    n = 0
    parse = lambda x: tf.io.parse_example(x, specs[name])
    if serial:
        pipeline = tf.data.TFRecordDataset(paths[name]).batch(256).map(parse)
    else:
        pipeline = tf.data.TFRecordDataset(paths[name], num_parallel_reads=auto).batch(256)
        pipeline = pipeline.map(parse, num_parallel_calls=auto).prefetch(auto)
    for batch in pipeline:
        n += int(batch['label'].shape[0])
    print(n, time.perf_counter() - start, time.process_time() - cpu, flush=True)
"""
_TF_LABELS = {"serial": "TensorFlow serial batch.map", "autotune": "TensorFlow AUTOTUNE"}


def make_vs_tf_data(directory: str, name: str) -> list[str]:
    """4 shards x 20,000 Examples of the given kind (made once, indexed)."""
    prefix = os.path.join(directory, f"vs-tf-{name}")
    paths = [f"{prefix}-{shard:05d}-of-00004.tfrecord" for shard in range(4)]
    if not all(os.path.exists(tt.default_index_path(path)) for path in paths):
        rng = np.random.default_rng(0)
        with tt.ShardedExampleWriter(prefix, max_records=20_000) as writer:
            for i in range(80_000):
                features: dict[str, Any] = {"label": i, "score": float(rng.random())}
                if name == "4KB":
                    features = {
                        "data": rng.bytes(4096),
                        "label": i,
                        "floats": rng.random(16, dtype=np.float32),
                    }
                writer.write(features)
        paths = writer.shard_paths
        for path in paths:
            tt.save_index(tt.build_index(path), tt.default_index_path(path))
    return paths


class _TensorFlow:
    """A TensorFlow process that stays up and times one pass over a data set when asked."""

    def __init__(self, tf_python: str, datasets: dict[str, list[str]], mode: str) -> None:
        self.process = subprocess.Popen(
            [tf_python, "-c", _TF_SERVER, repr(_VS_TF_PARSE), repr(datasets), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
        )
        self.seconds = (0.0, 0.0)

    def __call__(self, name: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()
        n, seconds, cpu = self.process.stdout.readline().split()
        self.seconds = float(seconds), float(cpu)  # its own clocks, no pipe
        return int(n)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


class _Persistent:
    """Passes of one DataLoader with ``persistent_workers=True`` (2 workers, started in the warm-up
    round), and the CPU seconds its workers spent in the last pass (read from /proc: they live on)."""

    def __init__(self, paths: list[str], name: str) -> None:
        dataset = tt.TFRecordDataset(paths, spec=VS_TF_SPECS[name], batch_size=BATCH, drop_last=False)
        self.loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
        self.worker_seconds = 0.0

    def __call__(self) -> int:
        before = self._workers_cpu()
        n = count(self.loader)
        self.worker_seconds = self._workers_cpu() - before
        return n

    def close(self) -> None:
        """Ends the workers (they hold, forked, the pipes of the TensorFlow processes started before)."""
        if self.loader._iterator is not None:
            self.loader._iterator._shutdown_workers()  # type: ignore[attr-defined]

    def _workers_cpu(self) -> float:
        iterator = self.loader._iterator
        if iterator is None:
            return 0.0
        total = 0
        for worker in iterator._workers:  # type: ignore[attr-defined]
            with open(f"/proc/{worker.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
        return total / os.sysconf("SC_CLK_TCK")


def vs_tensorflow(tf_python: str, directory: str, repeats: int, workers_only: bool = False) -> None:
    datasets = {name: make_vs_tf_data(directory, name) for name in VS_TF_SPECS}
    servers = {mode: _TensorFlow(tf_python, datasets, mode) for mode in _TF_LABELS}
    pipelines: list[tuple[str, str, Callable[[], int]]] = []
    for name, paths in datasets.items():
        for mode, server in servers.items():
            pipelines.append((name, _TF_LABELS[mode], lambda name=name, server=server: server(name)))  # type: ignore[misc]
        rows: tuple[tuple[Any, str, tuple[int, ...]], ...] = (
            (False, "file order", WORKERS),
            ("global", "global shuffle", WORKERS),
            ("block:1024", "block:1024 shuffle", (0,)),
            ("block:8192", "block:8192 shuffle", (0,)),
        )
        if workers_only:
            rows = ((False, "file order", (0, 2)), ("global", "global shuffle", (2,)))
        for shuffle, label, worker_counts in rows:
            for workers in worker_counts:
                pipelines.append(
                    (
                        name,
                        f"ours, {label}, {workers} workers",
                        lambda p=paths, n=name, w=workers, s=shuffle: count(  # type: ignore[misc]
                            DataLoader(
                                tt.TFRecordDataset(
                                    p, spec=VS_TF_SPECS[n], batch_size=BATCH, shuffle=s, drop_last=False
                                ),
                                batch_size=None,
                                num_workers=w,
                            )
                        ),
                    )
                )
        if sys.platform == "linux":
            pipelines.append((name, "ours, file order, 2 persistent workers", _Persistent(paths, name)))
    # Per row and round: wall seconds, CPU seconds of this process (of TensorFlow's, for its rows)
    # and of the DataLoader workers (ended, so counted as this process's children).
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    records: dict[tuple[str, str], int] = {}
    loads = []
    for round_ in range(repeats + 1):  # round 0 warms up (page cache, imports, TF's graph)
        for name, label, function in pipelines:
            start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
            n = function()
            took = (time.perf_counter() - start, time.process_time() - cpu, _children_cpu() - children)
            if label.startswith("TensorFlow"):
                server = servers["serial" if "serial" in label else "autotune"]
                took = (*server.seconds, 0.0)
            elif isinstance(function, _Persistent):
                took = (took[0], took[1], function.worker_seconds)
            if round_:
                times.setdefault((name, label), []).append(took)
                records[(name, label)] = n
        loads.append(os.getloadavg()[0])
    for _, _, function in pipelines:
        if isinstance(function, _Persistent):
            function.close()
    for server in servers.values():
        server.close()
    print(f"load average (1 min) after each round: {', '.join(f'{load:.1f}' for load in loads)}")
    header = f"{'data':4} {'pipeline':38} {'records':>7} {'median s':>9} {'records/s':>10}"
    print(f"{header} {'x TF best':>9} {'x order':>7} {'main ms/b':>9} {'workers ms/b':>12}")

    def median(key: tuple[str, str], column: int) -> float:
        return statistics.median(took[column] for took in times[key])

    def rate(key: tuple[str, str]) -> float:
        return records[key] / median(key, 0)

    for name, label, _ in pipelines:
        key = (name, label)
        best_tf = max(rate((name, tf_label)) for tf_label in _TF_LABELS.values())
        base = re.sub(r"^ours, [^,]+,", "ours, file order,", label)
        order = rate(key) / rate((name, base)) if (name, base) in records else 1.0
        batches = -(-records[key] // BATCH)
        print(
            f"{name:4} {label:38} {records[key]:>7} {median(key, 0):>9.3f} {rate(key):>10,.0f} "
            f"{rate(key) / best_tf:>9.2f} {order:>7.2f} {1000 * median(key, 1) / batches:>9.3f} "
            f"{1000 * median(key, 2) / batches:>12.3f}"
        )


_TELEMETRY_ROWS: tuple[tuple[str, Callable[[list[str], str, int, Any], int], Any, int], ...] = (
    ("ours batch mode, no shuffle", ours_batches, False, 0),
    ("ours batch mode, global shuffle", ours_batches, "global", 0),
    ("ours batch mode, no shuffle", ours_batches, False, 2),
    ("ours sample mode, global shuffle", ours_samples, "global", 0),
)


def telemetry_overhead(datasets: dict[str, list[str]], repeats: int) -> None:
    """Each row with the load telemetry on and off, alternately (see the module's docstring)."""
    from torch_tfrecord.data.telemetry.shared import ENV_VAR

    rows = []
    loads = []
    for name, paths in datasets.items():
        for label, function, shuffle, workers in _TELEMETRY_ROWS:
            taken: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
            n = 0
            for round_ in range(repeats + 1):  # round 0 warms up
                for mode in ("on", "off") if round_ % 2 else ("off", "on"):
                    os.environ[ENV_VAR] = "1" if mode == "on" else "0"  # read as the dataset is built
                    start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
                    n = function(paths, name, workers, shuffle)
                    wall = time.perf_counter() - start
                    if round_:
                        taken[mode].append((wall, time.process_time() - cpu + _children_cpu() - children))
            del os.environ[ENV_VAR]
            loads.append(os.getloadavg()[0])
            ratios = [on[0] / off[0] for on, off in zip(taken["on"], taken["off"], strict=True)]
            batches = -(-n // BATCH)
            rows.append(
                (
                    name,
                    label,
                    workers,
                    n / statistics.median(w for w, _ in taken["on"]),
                    n / statistics.median(w for w, _ in taken["off"]),
                    100 * (statistics.median(ratios) - 1),
                    1000 * statistics.median(c for _, c in taken["on"]) / batches,
                    1000 * statistics.median(c for _, c in taken["off"]) / batches,
                )
            )
    print(f"load average (1 min) after each row: {', '.join(f'{load:.1f}' for load in loads)}")
    print(
        f"{'data':6} {'pipeline':34} {'workers':>7} {'rec/s on':>10} {'rec/s off':>10} "
        f"{'time +%':>7} {'CPU ms/b on':>11} {'off':>7} {'CPU +%':>6}"
    )
    for name, label, workers, on, off, overhead, cpu_on, cpu_off in rows:
        print(
            f"{name:6} {label:34} {workers:>7} {on:>10,.0f} {off:>10,.0f} {overhead:>+7.1f} "
            f"{cpu_on:>11.3f} {cpu_off:>7.3f} {100 * (cpu_on / cpu_off - 1):>+6.1f}"
        )


_SELECT_WAYS = {"whole": {}, "random half": {"subset": 0.5}, "as long": {"samples_per_epoch": 80_000}}


def selection_cost(datasets: dict[str, list[str]], repeats: int) -> None:
    """A random half of each dataset read beside the whole and beside an epoch as long (see the
    module's docstring)."""
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    header = f"{'data':6} {'shuffle':7} {'workers':>7} {'half rec/s':>11} {'whole':>10} {'as long':>10}"
    print(f"{header} {'half/whole':>10} {'half/as long':>12}")
    for name, paths in datasets.items():
        for shuffle in (False, "global"):
            for workers in (0, 2):
                rates: dict[str, list[float]] = {way: [] for way in _SELECT_WAYS}
                ways = list(_SELECT_WAYS)
                for round_ in range(repeats + 1):  # round 0 warms up
                    for way in ways[round_ % 3 :] + ways[: round_ % 3]:
                        dataset = tt.TFRecordDataset(
                            paths, spec=SPECS[name], batch_size=BATCH, shuffle=shuffle, drop_last=False,
                            **_SELECT_WAYS[way],
                        )  # fmt: skip
                        start = time.perf_counter()
                        n = count(DataLoader(dataset, batch_size=None, num_workers=workers))
                        if round_:
                            rates[way].append(n / (time.perf_counter() - start))
                half = rates["random half"]
                over = [
                    statistics.median(a / b for a, b in zip(half, rates[way], strict=True))
                    for way in ("whole", "as long")
                ]
                row = f"{name:6} {shuffle!s:7} {workers:>7} {statistics.median(half):>11,.0f}"
                whole, same = statistics.median(rates["whole"]), statistics.median(rates["as long"])
                print(f"{row} {whole:>10,.0f} {same:>10,.0f} {over[0]:>10.3f} {over[1]:>12.3f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def telemetry_cpu(n: int = 200_000) -> None:
    """The telemetry's own CPU per batch (the loop's meter and three stages, as a batch-mode batch
    counts them) and per sample (sample mode's meter), on and off: best of 5 loops of ``n``. On a
    loaded machine this resolves what the rows' wall times cannot."""
    from torch_tfrecord.data.telemetry.shared import ENV_VAR, Telemetry
    from torch_tfrecord.support.stages import DECODE, HANDOFF, READ, begin, end, lap

    def batches(meter: Any) -> float:
        start = time.process_time()
        for _ in range(n):
            meter.asked()
            token = lap(READ, begin(), 4096)
            end(DECODE, token, BATCH)
            end(HANDOFF, begin())
            meter.ready()
        return (time.process_time() - start) / n

    def samples(meter: Any) -> float:
        start = time.process_time()
        for _ in range(n):
            meter.asked()
            meter.ready()
        return (time.process_time() - start) / n

    for mode in ("on", "off"):
        os.environ[ENV_VAR] = "1" if mode == "on" else "0"
        telemetry = Telemetry()
        batch = min(batches(telemetry.meter(None)) for _ in range(5))
        sample = min(samples(telemetry.meter(BATCH)) for _ in range(5))
        print(f"telemetry {mode:3}: {1e9 * batch:6,.0f} ns CPU a batch, {1e9 * sample:4,.0f} ns a sample")
    del os.environ[ENV_VAR]


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (DataLoader workers, once joined)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tf-python", help="a Python with TensorFlow: the table against it instead")
    parser.add_argument("--telemetry", action="store_true", help="what the load telemetry costs, instead")
    parser.add_argument("--select", action="store_true", help="what reading a selection costs, instead")
    parser.add_argument(
        "--workers-only",
        action="store_true",
        help="with --tf-python: only file order with 0 and 2 workers and global shuffle with 2",
    )
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    if args.tf_python:
        torch.set_num_threads(1)
        vs_tensorflow(args.tf_python, directory, args.repeats, args.workers_only)
        return
    torch.set_num_threads(1)
    rows = []
    datasets = {name: make_dataset(directory, name) for name in ("small", "large")}
    for paths in datasets.values():
        for path in paths:
            if not os.path.exists(tt.default_index_path(path)):
                tt.save_index(tt.build_index(path), tt.default_index_path(path))
    if args.telemetry:
        telemetry_cpu()
        telemetry_overhead(datasets, args.repeats)
        return
    if args.select:
        selection_cost(datasets, args.repeats)
        return
    for name, paths in datasets.items():
        timed(lambda: ours_batches(paths, name, 0, False), 1)  # warm the page cache
        peer: dict[int, float] = {}
        for workers in WORKERS:
            seconds, n = timed(lambda: tfrecord_package(paths, name, workers), args.repeats)
            peer[workers] = n / seconds
            rows.append((name, "tfrecord package DataLoader", workers, n, seconds, peer[workers]))
        for label, function, shuffle, decoder in (
            ("ours batch mode, global shuffle", ours_batches, "global", "native"),
            ("ours batch mode, shards shuffle", ours_batches, "shards", "native"),
            ("ours batch mode, no shuffle", ours_batches, False, "native"),
            ("ours batch, global, protobuf decoder", ours_batches, "global", "python"),
            ("ours sample mode, global shuffle", ours_samples, "global", "native"),
        ):
            os.environ[tt.native.ENV_VAR] = decoder  # workers inherit it
            for workers in WORKERS:
                seconds, n = timed(lambda: function(paths, name, workers, shuffle), args.repeats)
                rows.append((name, label, workers, n, seconds, peer[workers]))
            del os.environ[tt.native.ENV_VAR]
    header = f"{'data':6} {'pipeline':34} {'workers':>7} {'records':>8} {'median s':>9} {'records/s':>10}"
    print(f"{header} {'x peer':>7}")
    for name, label, workers, n, seconds, peer_rate in rows:
        rate = n / seconds
        print(
            f"{name:6} {label:34} {workers:>7} {n:>8} {seconds:>9.3f} {rate:>10,.0f} {rate / peer_rate:>7.2f}"
        )
    by_key = {(name, label, workers): n / s for name, label, workers, n, s, _ in rows}
    for name in datasets:
        for workers in WORKERS:
            cost = (
                by_key[(name, "ours batch mode, no shuffle", workers)]
                / by_key[(name, "ours batch mode, global shuffle", workers)]
            )
            print(
                f"global shuffle cost, {name}, {workers} workers: {100 * (cost - 1):+.1f}% time vs no shuffle"
            )
    print(f"\n{'records':>10} {'main after index MB':>20} {'main peak MB':>13} {'worker peak MB':>15}")
    for row in peak_rss(directory, datasets["small"]):
        assert row["seen"] == row["records"]
        print(
            f"{row['records']:>10,} {row['main_after_index_kb'] / 1024:>20.0f} "
            f"{row['main_kb'] / 1024:>13.0f} {row['worker_kb'] / 1024:>15.0f}"
        )


if __name__ == "__main__":
    main()
