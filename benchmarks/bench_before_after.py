"""The read path before and after a change, interleaved in one run: records/s of the datasets.

Two checkouts of the library (``--before DIR`` and ``--after DIR``, each with its extensions
built in place: ``python setup.py build_ext --inplace``) read the same shards, each pipeline in
a fresh process whose ``PYTHONPATH`` is that checkout, the two alternating round after round
(so a machine that slows down or speeds up slows both); medians of the rounds, and the ratio
after / before. The pipelines: ``TFRecordDataset(batch_size=256)`` through
``DataLoader(batch_size=None)`` over 4 local shards of 20,000 small Examples (~35 bytes) and of
4 KB Examples, with 0 and 2 workers, in file order and with the global shuffle; a ``tt.mix`` of
the two; and one epoch of the 4 KB shards from an S3-compatible server on 127.0.0.1 (moto)
with the node cache and without.

    python benchmarks/bench_before_after.py --before /tmp/before --after . [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_RUN = r"""
import json, sys, tempfile, time
import torch
from torch.utils.data import DataLoader
import torch_tfrecord as tt
config = json.loads(sys.argv[1])
spec = {"label": tt.FixedLen((), torch.int64)}
options = config.get("options")
def dataset(source, **kw):
    kw.setdefault("storage_options", options)
    if options is None:
        kw.pop("storage_options")
    return tt.TFRecordDataset(source, spec=spec, drop_last=False, **kw)
start = time.perf_counter()
if config["kind"] == "mix":
    small = dataset(config["small"], shuffle=config["shuffle"])
    large = dataset(config["large"], shuffle=config["shuffle"])
    ds = tt.mix({"small": small, "large": large}, batch_size=256, drop_last=False)
else:
    cache = config.get("cache")
    fresh = tempfile.TemporaryDirectory() if cache == "fresh" else None
    extra = {} if cache is None else {"cache_dir": fresh.name if fresh else cache}
    ds = dataset(config["source"], shuffle=config["shuffle"], batch_size=256, **extra)
loader = DataLoader(ds, batch_size=None, num_workers=config["workers"])
records = 0
for batch in loader:
    records += len(batch["_source"] if "_source" in batch else batch["label"])
seconds = time.perf_counter() - start
if config["kind"] != "mix" and fresh is not None:
    fresh.cleanup()
print(json.dumps({"records": records, "seconds": seconds}))
"""


def write(folder: str, name: str, size: int) -> str:
    sys.path.insert(0, os.getcwd())
    import torch

    import torch_tfrecord as tt

    generator = torch.Generator().manual_seed(0)
    with tt.ShardedExampleWriter(os.path.join(folder, name), max_records=20_000) as writer:
        for i in range(80_000):
            data = bytes(torch.randint(0, 256, (size,), generator=generator, dtype=torch.uint8).tolist())
            writer.write({"label": i, "data": tt.BytesList([data])} if size else {"label": i, "score": 0.5})
    return os.path.join(folder, f"{name}-*.tfrecord")


def run(tree: str, config: dict[str, object]) -> float:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(config)], capture_output=True, text=True, env=env, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["records"] / result["seconds"]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-remote", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        small, large = write(folder, "small", 0), write(folder, "large", 4096)
        configs: list[tuple[str, dict[str, object]]] = []
        for label, source in (("small", small), ("4 KB", large)):
            for shuffle in (False, "global"):
                for workers in (0, 2):
                    name = f"{label}, shuffle={shuffle}, {workers} workers"
                    configs.append(
                        (name, {"kind": "dataset", "source": source, "shuffle": shuffle, "workers": workers})
                    )
        configs.append(
            (
                "mix small + 4 KB, global, 0 workers",
                {"kind": "mix", "small": small, "large": large, "shuffle": "global", "workers": 0},
            )
        )
        servers = []
        if not args.no_remote:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
            import fsspec
            from remote_servers import moto_server, s3_options

            server = moto_server()
            endpoint = server.__enter__()
            servers.append(server)
            options = s3_options(endpoint)
            fs = fsspec.filesystem("s3", **options)
            fs.mkdir("bench")
            fs.put(folder + "/", "bench/d/", recursive=True)
            remote = "s3://bench/d/large-*.tfrecord"
            for cache in ("fresh", False):
                label = "node cache (a new one each run)" if cache else "no cache"
                configs.append(
                    (
                        f"S3 4 KB, shards, {label}",
                        {
                            "kind": "dataset",
                            "source": remote,
                            "shuffle": "shards",
                            "workers": 0,
                            "options": options,
                            "cache": cache,
                        },
                    )
                )
        try:
            results: dict[str, dict[str, list[float]]] = {
                name: {"before": [], "after": []} for name, _ in configs
            }
            for _ in range(args.rounds):
                for name, config in configs:
                    for side in ("before", "after"):
                        results[name][side].append(run(getattr(args, side), config))
        finally:
            for server in servers:
                server.__exit__(None, None, None)
    print(
        f"medians of {args.rounds} interleaved rounds, records/s; load average now {os.getloadavg()[0]:.1f}"
    )
    print(f"{'pipeline':<44} {'before':>12} {'after':>12} {'after/before':>13}")
    for name, sides in results.items():
        before, after = statistics.median(sides["before"]), statistics.median(sides["after"])
        print(f"{name:<44} {before:>12,.0f} {after:>12,.0f} {after / before:>13.3f}")


if __name__ == "__main__":
    main()
