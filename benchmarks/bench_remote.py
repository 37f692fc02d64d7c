"""Remote reading: TFRecordDataset over S3 (a local moto server) against the same shards on disk.

The same 8 shards (2,000 Examples of ~1 KB each, 16 MB) are written locally and to an
S3-compatible server on 127.0.0.1 (moto, started here), through a counting proxy that can add
latency per request, as an object store's time to first byte does. For each shuffle mode one
epoch is read with TFRecordDataset(batch_size=256) + DataLoader(batch_size=None) and 0 and 2
workers; the table gives the median time of the repeats, records/s, the ratio to local disk in
the same run, and the GET requests the epoch made (counted at the proxy; index files and
size lookups included).

    python benchmarks/bench_remote.py [--repeats 3] [--latency-ms 0 20]

A second table (``--faults``, alone with ``--faults-only``): 4 KB Examples in 64 shards behind
the proxy at 20 ms a request, each epoch a new dataset (and a new temporary cache): clean; with
1% of object GETs never answered; with 1% answered at 10 KB/s; 0 and 2 workers. It gives the
median epoch time and its ratio to the clean epoch's, the GETs an epoch made and the extra ones
against the clean epoch's, the faulted GETs and how long the reader held on to the longest of
them, and whether the records delivered (ids, in order) are those of the clean epoch.

Needs the `remote` extra and moto[server] (both in the `dev` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from remote_servers import FaultProxy, moto_server, s3_options

import torch_tfrecord as tt

SHARDS, PER_SHARD, BATCH = 8, 2000, 256
SPEC = {"label": tt.FixedLen((), torch.int64), "data": tt.FixedLen((), bytes)}


def write(prefix: str, storage_options: dict[str, Any] | None = None) -> None:
    rng = torch.Generator().manual_seed(0)
    with tt.ShardedExampleWriter(prefix, max_records=PER_SHARD, storage_options=storage_options) as writer:
        for i in range(SHARDS * PER_SHARD):
            data = bytes(torch.randint(0, 256, (1000,), generator=rng, dtype=torch.uint8).tolist())
            writer.write({"label": i, "data": tt.BytesList([data])})


def epoch(source: str, shuffle: Any, workers: int, storage_options: dict[str, Any] | None) -> int:
    ds = tt.TFRecordDataset(
        source, spec=SPEC, shuffle=shuffle, batch_size=BATCH, drop_last=False, storage_options=storage_options
    )
    return sum(len(b["label"]) for b in DataLoader(ds, batch_size=None, num_workers=workers))


def timed(repeats: int, run: Any) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


FAULT_SHARDS, FAULT_PER_SHARD, FAULT_BYTES = 64, 32, 4000
FAULT_SPEC = {"label": tt.FixedLen((), torch.int64), "data": tt.FixedLen((), bytes)}
FAULT_ROWS = (
    ("clean", {}),
    ("1% never answered", {"hang_every": 100}),
    ("1% at 10 KB/s", {"slow_every": 100}),
)


def load_average() -> str:
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def fault_epoch(options: dict[str, Any], workers: int) -> list[int]:
    ds = tt.TFRecordDataset(
        "s3://bench/faults/", spec=FAULT_SPEC, batch_size=64, seed=1, drop_last=False, storage_options=options
    )
    return [i for b in DataLoader(ds, batch_size=None, num_workers=workers) for i in b["label"].tolist()]


def faults_table(endpoint: str, repeats: int, latency: float) -> None:
    """Clean and faulty epochs through the proxy (see the module's docstring)."""
    options = s3_options(endpoint)
    with tt.ShardedExampleWriter(
        "s3://bench/faults/train", max_records=FAULT_PER_SHARD, storage_options=options
    ) as writer:
        for i in range(FAULT_SHARDS * FAULT_PER_SHARD):
            writer.write({"label": i, "data": tt.BytesList([bytes([i % 251]) * FAULT_BYTES])})
    records = FAULT_SHARDS * FAULT_PER_SHARD
    print(
        f"\n{records} records of ~4 KB in {FAULT_SHARDS} shards; +{latency * 1000:g} ms a request; "
        f"median of {repeats} epochs; load average {load_average()}"
    )
    header = ("faults", "workers", "median s", "x clean", "GETs", "extra", "faulted", "held s", "records")
    line = "{:<20} {:>7} {:>9} {:>8} {:>6} {:>6} {:>8} {:>7} {:>10}"
    print(line.format(*header))
    for workers in (0, 2):
        # The rows' epochs take turns (clean, faulty, faulty, clean, ...): the machine's drift
        # over a minute (other jobs, the store's growing state) falls on every row alike.
        with contextlib.ExitStack() as stack:
            proxies = [stack.enter_context(FaultProxy(endpoint, latency=latency, **f)) for _, f in FAULT_ROWS]
            times: list[list[float]] = [[] for _ in FAULT_ROWS]
            epochs: list[list[list[int]]] = [[] for _ in FAULT_ROWS]
            for _ in range(repeats):
                for row, proxy in enumerate(proxies):
                    start = time.perf_counter()
                    epochs[row].append(fault_epoch(s3_options(proxy.url), workers))
                    times[row].append(time.perf_counter() - start)
        clean_ids = epochs[0][0]
        clean_s = statistics.median(times[0])
        clean_gets = proxies[0].requests.get("GET", 0) / repeats
        for (name, _), proxy, row_times, row_epochs in zip(FAULT_ROWS, proxies, times, epochs, strict=True):
            stalled = [e for e in proxy.log if e[4].startswith(("hung", "slow"))]
            gets = proxy.requests.get("GET", 0) / repeats
            seconds = statistics.median(row_times)
            held = f"{max(e[1] for e in stalled):.2f}" if stalled else "-"
            print(
                line.format(
                    name,
                    workers,
                    f"{seconds:.3f}",
                    f"{seconds / clean_s:.2f}",
                    f"{gets:.1f}",
                    f"{(gets - clean_gets) / clean_gets:+.1%}",
                    len(stalled),
                    held,
                    "identical" if all(ids == clean_ids for ids in row_epochs) else "DIFFERENT",
                )
            )
    print(f"load average after: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--faults", action="store_true", help="also the table of faulty epochs")
    parser.add_argument("--faults-only", action="store_true", help="only the table of faulty epochs")
    parser.add_argument("--fault-repeats", type=int, default=5)
    args = parser.parse_args()
    import fsspec

    if args.faults_only:
        with moto_server() as endpoint:
            fsspec.filesystem("s3", **s3_options(endpoint)).mkdir("bench")
            faults_table(endpoint, args.fault_repeats, 0.02)
        return
    with tempfile.TemporaryDirectory() as root, moto_server() as endpoint:
        options = s3_options(endpoint)
        fsspec.filesystem("s3", **options).mkdir("bench")
        write(os.path.join(root, "train"))
        write("s3://bench/train", options)
        total = SHARDS * PER_SHARD
        print(f"{total} records of ~1 KB in {SHARDS} shards; batches of {BATCH}; median of {args.repeats}")
        header = ("storage", "shuffle", "workers", "median s", "records/s", "x local", "GETs")
        print("{:<16} {:<8} {:>7} {:>9} {:>10} {:>8} {:>6}".format(*header))
        for shuffle in ("global", "shards", False):
            for workers in (0, 2):
                local = timed(args.repeats, lambda: epoch(root, shuffle, workers, None))
                rate = total / local
                row = ("local disk", str(shuffle), workers, f"{local:.3f}", f"{rate:,.0f}", "1.00", "-")
                print("{:<16} {:<8} {:>7} {:>9} {:>10} {:>8} {:>6}".format(*row))
                for latency in args.latency_ms:
                    with FaultProxy(endpoint, latency=latency / 1000) as proxy:
                        proxied = s3_options(proxy.url)
                        seconds = timed(args.repeats, lambda: epoch("s3://bench/", shuffle, workers, proxied))
                        gets = proxy.requests.get("GET", 0) // args.repeats
                    name = f"s3 +{latency:g} ms"
                    print(
                        f"{name:<16} {shuffle!s:<8} {workers:>7} {seconds:>9.3f} {total / seconds:>10,.0f} "
                        f"{local / seconds:>8.2f} {gets:>6}"
                    )
        if args.faults:
            faults_table(endpoint, args.fault_repeats, 0.02)


if __name__ == "__main__":
    main()
