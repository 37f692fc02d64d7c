"""Remote reading: TFRecordDataset over S3 (a local moto server) against the same shards on disk.

The same 8 shards (2,000 Examples of ~1 KB each, 16 MB) are written locally and to an
S3-compatible server on 127.0.0.1 (moto, started here), through a counting proxy that can add
latency per request, as an object store's time to first byte does. For each shuffle mode one
epoch is read with TFRecordDataset(batch_size=256) + DataLoader(batch_size=None) and 0 and 2
workers; the table gives the median time of the repeats, records/s, the ratio to local disk in
the same run, and the GET requests the epoch made (counted at the proxy; index files and
size lookups included).

    python benchmarks/bench_remote.py [--repeats 3] [--latency-ms 0 20]

Needs the `remote` extra and moto[server] (both in the `dev` extra).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    args = parser.parse_args()
    import fsspec

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


if __name__ == "__main__":
    main()
