"""Threads in the loading process against DataLoader workers (issue 55): records/s, CPU, memory.

Data: bench_dataset.py's data sets against TensorFlow, 4 shards x 20,000 Examples of ~35 bytes
{label, score} and of ~4 KB {data: 4,096 bytes, label, floats: 16}, read from the page cache.
Every mode reads the same records: ``TFRecordDataset(batch_size=256, shuffle="global")``
through ``DataLoader(batch_size=None)``, construction included (the package imported before the clock):

- main process alone: ``threads=0`` (its prefetch thread, ``prefetch=2``), ``num_workers=0``;
- ``DataLoader(num_workers=1)`` and ``(num_workers=2)``;
- ``threads=1`` and ``threads=2``, ``num_workers=0``;
- the loading process: ``threads=2, process=True``, ``num_workers=0`` (the same threads in one
  child process, batches through its shared-memory ring: the trainer's process keeps its GIL).

Each pass runs in a fresh process (one per mode and round, the modes' order turning round by
round): wall seconds, the CPU seconds of the process and its workers, and the peak of their
resident memory (every 20 ms, the peaks so far of the processes alive then, VmHWM in
/proc/PID/status, added up; a forked worker's pages shared with its parent count in both).
``--steps`` adds a simulated training step that holds the GIL for X ms a batch (a pure-Python
loop, as a Python-heavy step does), X = 0, the main process's own time per batch (measured in
the first round), and twice it; the table then also says what share of the pass the trainer
spent in its steps (1.00: loading hidden entirely).
Medians over ``--repeats`` rounds after one warm-up round; ratios to the main process alone and
to 2 workers, in the same run.

    python benchmarks/bench_loader.py [--dir DIR] [--repeats 3] [--steps] [--shards 4]

(``--shards 1``: the first of the 4 shards only, a quick check that every mode runs.)
``--epochs K``: K epochs a pass (``set_epoch`` each; workers persistent, as a training run keeps
them): the rate a training run of many epochs meets, which a first pass's start-up (the process's
first batches, page mappings, workers starting) weighs on less.

``--per-batch`` prints instead the CPU and wall milliseconds per batch of ``threads=0, 1, 2`` in
this one process, passes alternating (no process start-up, no workers): what the threads cost in
CPU, which a machine loaded by others disturbs less than wall time; ``loop cpu`` is the CPU of the
thread iterating (the training loop's), through ``DataLoader(batch_size=None)`` and iterating the
dataset itself (the DataLoader's own ``__next__`` costs the loop's thread CPU and the GIL).

    python benchmarks/bench_loader.py --per-batch [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dataset import BATCH, VS_TF_SPECS, count, make_vs_tf_data

MODES = {  # name: (num_workers, threads, process)
    "main process alone (threads=0)": (0, 0, 0),
    "DataLoader(num_workers=1)": (1, 0, 0),
    "DataLoader(num_workers=2)": (2, 0, 0),
    "threads=1": (0, 1, 0),
    "threads=2": (0, 2, 0),
    "threads=2, process=True": (0, 2, 1),
}
MAIN, TWO_WORKERS = "main process alone (threads=0)", "DataLoader(num_workers=2)"

# One pass in a fresh process: argv = kind, paths (JSON), workers, threads, step ms, here, process, epochs.
_PASS = """
import gc, json, os, resource, sys, threading, time
import torch
from torch.utils.data import DataLoader
import torch_tfrecord as tt
sys.path.insert(0, sys.argv[6])
from bench_dataset import VS_TF_SPECS
torch.set_num_threads(1)
kind, paths, workers, threads, step_ms = sys.argv[1], json.loads(sys.argv[2]), *map(float, sys.argv[3:6])
# The package's modules are imported on first use: once per process, before the clock (a user
# pays it once; where .pyc files are not written, it was most of a pass of 80,000 small records).
tt.TFRecordDataset
peak = {"rss": 0}  # kB
done = threading.Event()

def tree():
    pids, at = [os.getpid()], 0
    while at < len(pids):
        for task in os.listdir(f"/proc/{pids[at]}/task"):
            try:
                with open(f"/proc/{pids[at]}/task/{task}/children") as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
        at += 1
    return pids

def sample_once():
    # /proc/PID/status's VmHWM: the kernel's own peak of the process's resident memory (60 us to
    # read; smaps_rollup, which PSS needs, took 15 ms for a process with torch: every 20 ms, for
    # three processes, that was a core of this 2-core machine taken from the modes measured).
    # The live processes' peaks added up (a loading process per epoch: only the one alive).
    total = 0
    for pid in tree():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    peak["rss"] = max(peak["rss"], total)

def sample():
    while not done.wait(0.02):
        sample_once()

sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start, cpu = time.perf_counter(), time.process_time()
ds = tt.TFRecordDataset(paths, spec=VS_TF_SPECS[kind], batch_size=256, shuffle="global",
                        drop_last=False, threads=int(threads), process=sys.argv[7] == "1")
n = 0
# (several epochs: workers kept up between them, as a training run keeps them)
loader = DataLoader(ds, batch_size=None, num_workers=int(workers), persistent_workers=workers > 0)
for epoch in range(int(sys.argv[8])):
    ds.set_epoch(epoch)
    for batch in loader:
        n += len(batch["label"])
        if step_ms:  # a training step holding the GIL (but for the interpreter's switch interval)
            until = time.perf_counter() + step_ms / 1000
            while time.perf_counter() < until:
                pass
seconds = time.perf_counter() - start
done.set()
sampler.join()
sample_once()  # (the persistent workers, still up)
del loader  # its workers end, so that their CPU is counted below
gc.collect()
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"records": n, "seconds": seconds, "cpu": time.process_time() - cpu
                  + children.ru_utime + children.ru_stime, "rss_kb": peak["rss"]}))
"""


def one_pass(
    kind: str, paths: list[str], workers: int, threads: int, process: int, step_ms: float, epochs: int = 1
) -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    numbers = map(str, (workers, threads, step_ms))
    done = subprocess.run(
        [sys.executable, "-c", _PASS, kind, json.dumps(paths), *numbers, here, str(process), str(epochs)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(
    kind: str, paths: list[str], step_ms: float, repeats: int, epochs: int = 1
) -> dict[str, dict[str, float]]:
    """Medians of each mode over ``repeats`` rounds (after a warm-up round), modes turning round by
    round; each pass ``epochs`` epochs."""
    names = list(MODES)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_ in range(repeats + 1):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            result = one_pass(kind, paths, *MODES[name], step_ms, epochs)
            if round_:
                runs[name].append(result)
    return {
        name: {key: statistics.median(float(run[key]) for run in found) for key in found[0]}
        for name, found in runs.items()
    }


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def print_table(kind: str, step_ms: float, medians: dict[str, dict[str, float]], epochs: int = 1) -> None:
    main, two = medians[MAIN], medians[TWO_WORKERS]
    rate = {name: m["records"] / m["seconds"] for name, m in medians.items()}
    passes = f"{epochs} epochs a pass, " if epochs > 1 else ""
    print(f"\n{kind}, {passes}step {step_ms:.2f} ms a batch holding the GIL (load average {_loadavg()})")
    header = f"{'mode':32} {'records/s':>10} {'x main':>7} {'x 2 wkrs':>8} {'cpu s':>6} {'RSS MB':>7}"
    print(header + (f" {'step share':>10}" if step_ms else ""))
    for name, m in medians.items():
        line = (
            f"{name:32} {rate[name]:>10,.0f} {rate[name] / rate[MAIN]:>7.2f} "
            f"{rate[name] / rate[TWO_WORKERS]:>8.2f} {m['cpu']:>6.2f} {m['rss_kb'] / 1024:>7.0f}"
        )
        if step_ms:  # the trainer's share of the pass in its steps
            line += f" {(m['records'] / BATCH) * step_ms / 1000 / m['seconds']:>10.2f}"
        print(line)
    process = "threads=2, process=True"
    print(
        f"loading process: {rate[process] / rate['threads=2']:.2f}x threads=2 in the main process, "
        f"{rate[process] / rate[TWO_WORKERS]:.2f}x 2 workers, RSS "
        f"{medians[process]['rss_kb'] / two['rss_kb']:.2f}x 2 workers'"
    )
    print(
        f"threads=2: {rate['threads=2'] / rate[MAIN]:.2f}x the main process alone (target 1.6), "
        f"{rate['threads=2'] / rate[TWO_WORKERS]:.2f}x 2 workers (target 1.5), RSS "
        f"{medians['threads=2']['rss_kb'] / two['rss_kb']:.2f}x 2 workers' (target <= 0.5); "
        f"main alone {1000 * main['seconds'] / (main['records'] / BATCH):.2f} ms a batch"
    )


def per_batch(kind: str, paths: list[str], repeats: int) -> None:
    """CPU and wall ms per batch of threads=0, 1, 2 in this process, passes alternating: through
    ``DataLoader(batch_size=None)`` and iterating the dataset itself."""
    import torch
    from torch.utils.data import DataLoader

    import torch_tfrecord as tt

    torch.set_num_threads(1)
    modes = [(wrapped, threads) for wrapped in (True, False) for threads in (0, 1, 2)]
    found: dict[tuple[bool, int], list[tuple[float, float, float, int]]] = {mode: [] for mode in modes}
    for round_ in range(repeats + 1):
        for wrapped, threads in modes:
            dataset = tt.TFRecordDataset(
                paths, spec=VS_TF_SPECS[kind], batch_size=BATCH, shuffle="global", drop_last=False,
                threads=threads,
            )  # fmt: skip
            batches = DataLoader(dataset, batch_size=None) if wrapped else dataset
            cpu, loop, wall = time.process_time(), time.thread_time(), time.perf_counter()
            records = count(batches)
            if round_:  # (the first round warms up)
                took = time.process_time() - cpu, time.thread_time() - loop, time.perf_counter() - wall
                found[wrapped, threads].append((*took, records))
    print(f"\n{kind}, in one process (load average {_loadavg()})")
    print(f"{'mode':34} {'cpu ms/batch':>13} {'loop cpu ms':>12} {'wall ms/batch':>14} {'x threads=0':>12}")
    walls: dict[tuple[bool, int], float] = {}
    for (wrapped, threads), runs in found.items():
        batches = runs[0][3] / BATCH
        cpu, loop, walls[wrapped, threads] = (
            1000 * statistics.median(run[i] for run in runs) / batches for i in range(3)
        )
        ratio = walls[wrapped, 0] / walls[wrapped, threads]
        name = f"threads={threads}, " + ("DataLoader(batch_size=None)" if wrapped else "the dataset itself")
        print(f"{name:34} {cpu:>13.3f} {loop:>12.3f} {walls[wrapped, threads]:>14.3f} {ratio:>12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", action="store_true", help="also with a training step of X ms a batch")
    parser.add_argument("--kinds", default="35B,4KB", help="the data sets, of 35B and 4KB")
    parser.add_argument("--per-batch", action="store_true", help="CPU and wall per batch in one process")
    parser.add_argument("--shards", type=int, default=4, help="read the first SHARDS of the 4 shards")
    parser.add_argument("--epochs", type=int, default=1, help="epochs a pass (default: 1)")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    print(f"start: load average {_loadavg()}, {os.cpu_count()} cores")
    for kind in args.kinds.split(","):
        paths = make_vs_tf_data(directory, kind)[: args.shards]
        if args.per_batch:
            per_batch(kind, paths, args.repeats)
            continue
        medians = measure(kind, paths, 0.0, args.repeats, args.epochs)
        print_table(kind, 0.0, medians, args.epochs)
        if args.steps:
            main_ms = 1000 * medians[MAIN]["seconds"] / (medians[MAIN]["records"] / BATCH)
            for step_ms in (main_ms, 2 * main_ms):
                found = measure(kind, paths, step_ms, args.repeats, args.epochs)
                print_table(kind, step_ms, found, args.epochs)


if __name__ == "__main__":
    main()
