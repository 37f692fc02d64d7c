"""The node-local cache of remote shards: bytes fetched per epoch and time to first batch.

8 shards x 2,000 Examples of ~250 B (about 4 MB) are served by a ranged HTTP server on
127.0.0.1 (started here, in its own process) that counts the bytes and requests it answers,
with ``--latency-ms`` added to each request (an object store's time to first byte). One epoch
of TFRecordDataset(batch_size=100) + DataLoader(batch_size=None, num_workers=2) per row:
``shuffle="shards"`` without a cache (the peer: sequential reads with read-ahead), the default
global shuffle and a block shuffle with the default cache (a temporary directory), the global
shuffle's second epoch over a kept ``cache_dir``, and, with ``--uncached-global``, the global
shuffle without a cache (slow: every batch fetches nearly every shard).

    python benchmarks/bench_cache.py [--latency-ms 0] [--uncached-global]

Needs the `remote` extra (fsspec's HTTP file system).
"""

from __future__ import annotations

import argparse
import http.server
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from remote_servers import free_port

import torch_tfrecord as tt

SHARDS, PER_SHARD, BATCH = 8, 2000, 100
SPEC = {"label": tt.FixedLen((), torch.int64), "data": tt.FixedLen((), bytes)}


def serve(root: str, port: int, latency: float) -> None:
    """A ranged HTTP server for the files under ``root``; ``GET /__counts__`` gives its counts."""
    counts = {"bytes": 0, "requests": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # (headers and body are two writes: no 40 ms wait between)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, head: bool) -> None:
            if self.path == "/__counts__":
                with lock:
                    body = json.dumps(counts).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if latency:
                time.sleep(latency)
            path = os.path.join(root, self.path.lstrip("/"))
            if not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = os.path.getsize(path)
            start, end, status = 0, size, 200
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes="):
                first, _, last = ranged[len("bytes=") :].partition("-")
                start, end, status = int(first), min(size, int(last) + 1 if last else size), 206
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start) if not head else b""
            self.send_response(status)
            self.send_header("Content-Length", str(end - start if not head else size))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{os.stat(path).st_mtime_ns}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            self.wfile.write(body)
            with lock:
                counts["bytes"] += len(body)
                counts["requests"] += 1

        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


def counts(base: str) -> dict[str, int]:
    with urllib.request.urlopen(base + "/__counts__") as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def epoch(
    urls: list[str], base: str, shuffle: str, cache_dir: Any, epochs: int = 1
) -> list[tuple[float, float, int, int]]:
    """(time to first batch, epoch time, bytes, requests) of each epoch (dataset making included
    in the first)."""
    rows = []
    before = counts(base)
    start = time.perf_counter()
    ds = tt.TFRecordDataset(urls, spec=SPEC, batch_size=BATCH, shuffle=shuffle, cache_dir=cache_dir)
    for e in range(epochs):
        ds.set_epoch(e)
        first = None
        records = 0
        for batch in DataLoader(ds, batch_size=None, num_workers=2):
            first = first if first is not None else time.perf_counter() - start
            records += len(batch["label"])
        assert records == SHARDS * PER_SHARD, records
        after = counts(base)
        rows.append(
            (
                first or 0.0,
                time.perf_counter() - start,
                after["bytes"] - before["bytes"],
                after["requests"] - before["requests"],
            )
        )
        before, start = after, time.perf_counter()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument(
        "--uncached-global", action="store_true", help="also the global shuffle without a cache"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        rng = torch.Generator().manual_seed(0)
        with tt.ShardedExampleWriter(os.path.join(root, "train"), max_records=PER_SHARD) as writer:
            for i in range(SHARDS * PER_SHARD):
                writer.write(
                    {"label": i, "data": bytes(torch.randint(0, 256, (230,), generator=rng).tolist())}
                )
        names = sorted(n for n in os.listdir(root) if n.endswith(".tfrecord"))
        data = sum(os.path.getsize(os.path.join(root, n)) for n in names)
        port = free_port()
        server = multiprocessing.get_context("spawn").Process(
            target=serve, args=(root, port, args.latency_ms / 1000), daemon=True
        )
        server.start()
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                counts(base)
                break
            except OSError:
                time.sleep(0.1)
        urls = [f"{base}/{n}" for n in names]
        print(
            f"{SHARDS} shards x {PER_SHARD} Examples, {data:,} bytes; batches of {BATCH}; 2 workers; "
            f"+{args.latency_ms:g} ms per request"
        )
        print(
            f"{'shuffle':12} {'cache':22} {'epoch':>5} {'first batch s':>13} {'epoch s':>8} "
            f"{'bytes':>12} {'x data':>7} {'requests':>8}"
        )
        results: dict[str, tuple[float, float, int, int]] = {}

        def show(name: str, cache: str, number: int, row: tuple[float, float, int, int]) -> None:
            first, seconds, fetched, requests = row
            print(
                f"{name:12} {cache:22} {number:>5} {first:>13.3f} {seconds:>8.3f} {fetched:>12,} "
                f"{fetched / data:>7.2f} {requests:>8,}"
            )

        (results["shards"],) = epoch(urls, base, "shards", False)
        show("shards", "none", 1, results["shards"])
        (results["global"],) = epoch(urls, base, "global", None)
        show("global", "default (temporary)", 1, results["global"])
        (block,) = epoch(urls, base, "block:1024", None)
        show("block:1024", "default (temporary)", 1, block)
        with tempfile.TemporaryDirectory() as cache_dir:
            for number, row in enumerate(epoch(urls, base, "global", cache_dir, epochs=2), 1):
                show("global", "cache_dir (kept)", number, row)
        if args.uncached_global:
            (uncached,) = epoch(urls, base, "global", False)
            show("global", "none", 1, uncached)
        server.terminate()
        shards, default = results["shards"], results["global"]
        print(
            f"default global shuffle: {default[2] / data:.2f}x the data's bytes (target <= 1.1), "
            f"{default[1] / shards[1]:.2f}x the time of shuffle='shards' without a cache (target <= 1.5)"
        )


if __name__ == "__main__":
    main()
