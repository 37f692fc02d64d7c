"""Start-up at scale: how long a rank takes, and how many requests it sends, before its first batch.

Shards of 50 small Examples each (written by tt.ShardedExampleWriter, so each has its .idx, and the
dataset its manifest) are put on an S3-compatible server on 127.0.0.1 (moto, started here) behind a
counting proxy that adds a latency to every request, as an object store's time to first byte does
(20 ms by default). For each configuration a fresh process builds
``TFRecordDataset(source, spec=..., batch_size=64, rank=r, world_size=8, cache_dir=...)`` and
takes its first batch; the table gives the time to build the dataset, to the first batch, and
the requests the proxy answered for that process (for 8 ranks on one node, started together:
the slowest rank, and the requests per rank on average), and the CPU seconds a rank spent from
building the dataset to its first batch (the mean; its imports before are not in it): 8 ranks
on a machine of fewer cores than ranks wait for each other's CPU, at least
8 x that / the cores.

Sources: the manifest itself (``s3://.../train.manifest.json``), the glob with the manifest
beside it (found in the listing), and the glob without a manifest (one request per shard:
its index). 8 ranks share the node's cache directory (``cache_dir=``), through which they share
the index files too.

A simulated start at 100,000 shards (no server): a manifest of 100,000 shards of 50 records on
``memory://`` (the tables too large to zip: fetched per shard when read), the dataset built from
it and the plan of a first global-shuffle batch computed; time and the process's peak memory.

    python benchmarks/bench_startup.py [--shards 2000 20000] [--latency-ms 20] [--ranks 1 8]
        [--sources manifest beside none] [--simulate 100000] [--server s3|http]

``--server http`` serves the shards' folder over plain HTTP instead (ranged GETs and HEADs, no
listing; the latency added by the server itself), the setup of issue 45: the manifest is then
the only source (a glob cannot be expanded over HTTP).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

PER_SHARD, BATCH = 50, 64

_RANK = r"""
import json, sys, time
import torch
import torch_tfrecord as tt
source, options, rank, world, shuffle, cache = json.loads(sys.argv[1])
start, cpu = time.perf_counter(), time.process_time()
ds = tt.TFRecordDataset(source, spec={"id": tt.FixedLen((), torch.int64)}, batch_size=64, rank=rank,
                        world_size=world, shuffle=shuffle, storage_options=options, cache_dir=cache or False)
built = time.perf_counter() - start
loop = iter(ds)
next(loop)  # (timed when it returns: not when the loop, closed, has ended the batches loading ahead)
first, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"built": built, "first": first, "cpu": cpu}), flush=True)
sys.stdin.readline()  # the requests are counted once every rank has its first batch
"""


def write_shards(folder: str, shards: int) -> None:
    import torch_tfrecord as tt

    with tt.ShardedExampleWriter(os.path.join(folder, "train"), max_records=PER_SHARD) as writer:
        for i in range(shards * PER_SHARD):
            writer.write({"id": i})


def upload(fs: Any, folder: str, bucket: str) -> None:
    fs.mkdir(bucket)
    fs.put(folder + "/", f"{bucket}/d/", recursive=True)


def start_ranks(
    proxy: Any, source: str, options: dict[str, Any], ranks: int, shuffle: Any, cache: str | None
) -> dict[str, float]:
    """``ranks`` processes started together (rank 0..ranks-1 of 8); the slowest's times and the
    requests per process up to the moment the last of them has its first batch (what the ranks
    load ahead after their first batch is in it as far as it has gone by then)."""
    proxy.reset()
    world = 8
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, json.dumps([source, options, rank, world, shuffle, cache])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]
    results = []
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            out, _ = proc.communicate(timeout=900)
            raise RuntimeError(f"a rank failed: {out}")
        results.append(json.loads(line))
    requests = sum(proxy.requests.values())
    for proc in procs:
        proc.communicate("\n", timeout=900)
    return {
        "built": max(r["built"] for r in results),
        "first": max(r["first"] for r in results),
        "cpu": sum(r["cpu"] for r in results) / ranks,
        "requests": requests / ranks,
    }


def simulated(shards: int) -> dict[str, float]:
    """A dataset of ``shards`` shards built from its manifest on memory://, with its first plan."""
    code = r"""
import json, resource, sys, time
import numpy as np
import torch
import torch_tfrecord as tt
from torch_tfrecord.records import remote
from torch_tfrecord.records.manifest import Manifest, ManifestShard, encode_manifest
shards = int(sys.argv[1])
names = [f"train-{i:06d}.tfrecord" for i in range(shards)]
entries = tuple(ManifestShard(name, 50 * 40, 50, "", name + ".idx") for name in names)
location = "memory://big/train.manifest.json"
remote.write_bytes(location, encode_manifest(Manifest(location, entries)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
ds = tt.TFRecordDataset("memory://big/train.manifest.json", spec={"id": tt.FixedLen((), torch.int64)},
                        batch_size=64, rank=0, world_size=8, cache_dir=False)
built = time.perf_counter() - start
ids, _ = ds.plan.records(ds.plan.unit_positions([0]), 0)
planned = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"built": built, "planned": planned, "records": ds.num_records, "rss_mb": peak / 1024,
                  "growth_mb": (peak - before) / 1024}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(shards)], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def over_http(counts: list[int], latency: float, ranks_run: list[int]) -> None:
    """The manifest's rows with the shards on a plain HTTP server (the issue's setup)."""
    from remote_servers import RangedFileServer

    for shards in counts:
        with tempfile.TemporaryDirectory() as folder:
            write_shards(folder, shards)
            with RangedFileServer(folder, latency=latency) as server:
                for shuffle in ("global", "shards"):
                    for ranks in ranks_run:
                        with tempfile.TemporaryDirectory() as cache:
                            row = start_ranks(
                                server,
                                f"{server.url}/train.manifest.json",
                                {},
                                ranks,
                                shuffle,
                                cache if ranks > 1 else None,
                            )
                        print(
                            f"{shards:>7} {'the manifest, over HTTP':<26} {shuffle:<8} {ranks:>5} "
                            f"{row['built']:>8.2f} {row['first']:>11.2f} {row['requests']:>13.0f} "
                            f"{row['cpu']:>10.2f}",
                            flush=True,
                        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--simulate", type=int, default=100_000, help="shards of the simulated start (0: none)"
    )
    parser.add_argument(
        "--sources",
        nargs="+",
        choices=("manifest", "beside", "none"),
        default=["manifest", "beside", "none"],
        help="which sources: the manifest, a glob with the manifest beside it, a glob without one",
    )
    parser.add_argument(
        "--server",
        choices=("s3", "http"),
        default="s3",
        help="s3: moto behind the latency proxy; http: the files over plain HTTP (ranged GETs, no "
        "listing), the latency added by the server (the manifest is then the only source)",
    )
    args = parser.parse_args()

    import fsspec
    from remote_servers import FaultProxy, moto_server, s3_options

    print(f"latency {args.latency_ms:g} ms a request; {PER_SHARD} records a shard; batch {BATCH}; world of 8")
    columns = (
        "shards",
        "source",
        "shuffle",
        "ranks",
        "built s",
        "1st batch s",
        "requests/rank",
        "CPU s/rank",
    )
    print("{:>7} {:<26} {:<8} {:>5} {:>8} {:>11} {:>13} {:>10}".format(*columns))
    if args.server == "http":
        over_http(args.shards, args.latency_ms / 1000, args.ranks)
        args.shards = []
    for shards in args.shards:
        with tempfile.TemporaryDirectory() as folder, moto_server() as endpoint:
            write_shards(folder, shards)
            fs = fsspec.filesystem("s3", **s3_options(endpoint))
            upload(fs, folder, f"bench{shards}")
            with FaultProxy(endpoint, latency=args.latency_ms / 1000) as proxy:
                options = s3_options(proxy.url)
                base = f"s3://bench{shards}/d"
                runs = [
                    ("manifest", "the manifest", f"{base}/train.manifest.json", True),
                    ("beside", "a glob, manifest beside", f"{base}/train-*.tfrecord", True),
                    ("none", "a glob, no manifest", f"{base}/train-*.tfrecord", False),
                ]
                for key, label, source, manifest in runs:
                    if key not in args.sources:
                        continue
                    if not manifest:
                        fs.rm(f"bench{shards}/d/train.manifest.json")
                    for shuffle in ("global", "shards"):
                        for ranks in args.ranks:
                            with tempfile.TemporaryDirectory() as cache:
                                row = start_ranks(
                                    proxy, source, options, ranks, shuffle, cache if ranks > 1 else None
                                )
                            print(
                                f"{shards:>7} {label:<26} {shuffle:<8} {ranks:>5} {row['built']:>8.2f} "
                                f"{row['first']:>11.2f} {row['requests']:>13.0f} {row['cpu']:>10.2f}",
                                flush=True,
                            )
    if args.simulate:
        found = simulated(args.simulate)
        print(
            f"\nsimulated: {args.simulate:,} shards ({found['records']:,} records) from a manifest on "
            f"memory://: built in {found['built']:.2f} s, first batch planned at {found['planned']:.2f} s, "
            f"peak RSS {found['rss_mb']:.0f} MB (+{found['growth_mb']:.0f} MB while building)"
        )


if __name__ == "__main__":
    main()
