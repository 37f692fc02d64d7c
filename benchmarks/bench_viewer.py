"""``torch-tfrecord view`` on a large shard, in headless Chromium: the first page from launch, a jump
to the last record, and the server's memory.

A shard of detection records (a PNG with one box, and zero padding for size: ``--record-kb``) is
written once to ``--dir`` (default /tmp/bench_viewer, 2 GB). For each case the viewer is started
as a process (torch unimportable, as the tests run it) and Chromium (Debian's, /usr/bin/chromium,
already running) opens the page:

- first page: from starting the viewer process to the page showing records 0-19 with record 0's
  image and box drawn;
- last page: from a click on "last" to record N-1's image drawn;
- RSS: the server's resident memory (VmRSS) and its peak (VmHWM) after the jump, and again after
  the statistics have read the shard for ``--stats-seconds``.

Cases: the shard with its index beside it, and without (the viewer builds the index in the
background once the first page is served; that page is read from the start). The first page from
launch is measured ``--launches`` times per case (a fresh viewer process each time; median, min
and max); the jump and the memory once. The peer in the same run is ``torch-tfrecord head -n 20``
(a process that prints the first 20 records), and ``--against DIR`` also runs the first-page
launches of another checkout of the project (e.g. main) interleaved with this one's. The
checkouts' bytecode is written first, as ``pip install`` writes it.

    python benchmarks/bench_viewer.py [--size-gb 2] [--record-kb 100] [--dir /tmp/bench_viewer]
        [--launches 7] [--against /path/to/other/checkout]

Needs Pillow and playwright (the dev extra) and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import viewer_server
from viewer_data import detection_record
from viewer_server import CHROMIUM, CHROMIUM_ARGS, running_viewer

from torch_tfrecord.records.writer import RecordWriter


def make_shard(folder: Path, size_gb: float, record_kb: int) -> tuple[Path, int]:
    """The shard (written if missing or of another size) and its record count."""
    records = int(size_gb * (1 << 30)) // (record_kb << 10)
    path = folder / f"big-{records}x{record_kb}k.tfrecord"
    if not path.exists() or not Path(str(path) + ".idx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with RecordWriter(str(path)) as writer:
            for number in range(records):
                writer.write(detection_record(number, padding=record_kb << 10))
        seconds = time.perf_counter() - start
        print(f"wrote {path} ({path.stat().st_size / (1 << 30):.2f} GiB) in {seconds:.1f} s")
    return path, records


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


def one_case(browser: Any, path: Path, records: int, stats_seconds: float) -> dict[str, Any]:
    context = browser.new_context()
    page = context.new_page()
    start = time.perf_counter()
    with running_viewer(str(path)) as (url, process):
        ready = time.perf_counter() - start  # the viewer printed its URL: it listens
        loaded = time.perf_counter()
        page.goto(f"{url}#records/0/0")
        page.wait_for_selector("#record-0 canvas[data-ready='1']", timeout=60_000)
        page.wait_for_selector("#record-19")
        first = time.perf_counter() - start
        shown = time.perf_counter() - loaded
        index_wait = time.perf_counter()
        page.wait_for_selector("#range >> text=/of [0-9,]+$/", timeout=600_000)  # the index is ready
        index_ready = time.perf_counter() - index_wait
        jump = time.perf_counter()
        page.click("#last")
        page.wait_for_selector(f"#record-{records - 1} canvas[data-ready='1']", timeout=60_000)
        last = time.perf_counter() - jump
        after_jump = memory(process.pid)
        page.goto(f"{url}#statistics")
        time.sleep(stats_seconds)
        counted = page.inner_text("h2")
        after_stats = memory(process.pid)
    context.close()
    return {
        "ready": ready,
        "shown": shown,
        "first": first,
        "index_wait": index_ready,
        "last": last,
        "rss_jump": after_jump["VmRSS"],
        "rss_stats": after_stats["VmRSS"],
        "peak": after_stats["VmHWM"],
        "stats": counted,
    }


def compile_package(root: Path) -> None:
    """Writes the package's bytecode, as ``pip install`` does: a machine that sets
    PYTHONDONTWRITEBYTECODE (this one does) otherwise compiles every module again at each launch."""
    compileall.compile_dir(str(root / "torch_tfrecord"), quiet=1)


def first_page(browser: Any, path: Path, root: Path | None = None) -> float:
    """Seconds from starting a viewer process (of the checkout at ``root``; None: this one) to
    its first page shown with record 0's image drawn."""
    saved = viewer_server.ROOT
    viewer_server.ROOT = root or saved
    context = browser.new_context()
    page = context.new_page()
    try:
        start = time.perf_counter()
        with running_viewer(str(path)) as (url, _):
            page.goto(f"{url}#records/0/0")
            page.wait_for_selector("#record-0 canvas[data-ready='1']", timeout=60_000)
            page.wait_for_selector("#record-19")
            return time.perf_counter() - start
    finally:
        context.close()
        viewer_server.ROOT = saved


def launches(browser: Any, path: Path, count: int, against: Path | None) -> dict[str, list[float]]:
    """``count`` first pages from launch, this checkout's interleaved with ``against``'s."""
    times: dict[str, list[float]] = {"this checkout": []}
    if against is not None:
        times[str(against)] = []
    for _ in range(count):
        times["this checkout"].append(first_page(browser, path))
        if against is not None:
            times[str(against)].append(first_page(browser, path, against))
    return times


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def head_seconds(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "torch_tfrecord", "head", str(path), "-n", "20"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--record-kb", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench_viewer"))
    parser.add_argument("--stats-seconds", type=float, default=10.0)
    parser.add_argument("--launches", type=int, default=7, help="first pages from launch per case")
    parser.add_argument("--against", type=Path, help="another checkout whose first pages to time too")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    path, records = make_shard(args.dir, args.size_gb, args.record_kb)
    for root in [viewer_server.ROOT, *([args.against] if args.against else [])]:
        compile_package(root)
    index = Path(str(path) + ".idx")
    saved = Path(str(index) + ".saved")
    shutil.copy(index, saved)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto("about:blank")  # the browser is up before the clock starts
        page.close()
        before = load()
        first = {"index beside the shard": launches(browser, path, args.launches, args.against)}
        results = {"index beside the shard": one_case(browser, path, records, args.stats_seconds)}
        index.unlink()
        try:
            first["no index: built by the viewer"] = launches(browser, path, args.launches, args.against)
            results["no index: built by the viewer"] = one_case(browser, path, records, args.stats_seconds)
        finally:
            shutil.copy(saved, index)  # the viewer never writes an index: put the saved one back
            saved.unlink()
        browser.close()
    head = head_seconds(path)
    size = path.stat().st_size / (1 << 30)
    print(f"\n{path.name}: {size:.2f} GiB, {records:,} records of {args.record_kb} KB")
    columns = [
        "case",
        "listening after",
        "page shown after (from goto)",
        "first page from launch",
        "index ready after",
        "jump to last",
        "RSS after jump",
        "RSS after stats",
        "peak RSS",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for name, r in results.items():
        times = [r[k] for k in ("ready", "shown", "first", "index_wait", "last")]
        memories = [r[k] for k in ("rss_jump", "rss_stats", "peak")]
        cells = [f"{t:.2f} s" for t in times] + [f"{m:.0f} MB" for m in memories]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"| peer: `torch-tfrecord head -n 20`, process start to exit | | | {head:.2f} s | | | | | |")
    for name, r in results.items():
        print(f"statistics after {args.stats_seconds:.0f} s ({name}): {r['stats']}")
    loads = f"load average {before} before, {load()} after"
    print(f"\nfirst page from launch, {args.launches} launches each ({loads})")
    print("| case | checkout | median | min | max |")
    print("|---|---|---|---|---|")
    for name, by_tree in first.items():
        for tree, times in by_tree.items():
            cells = [f"{t:.2f} s" for t in (statistics.median(times), min(times), max(times))]
            print(f"| {name} | {tree} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
