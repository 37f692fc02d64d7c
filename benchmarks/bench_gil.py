"""Who holds the GIL while ``TFRecordDataset(threads=N)`` feeds a loop: py-spy's GIL samples, sorted.

With loading threads the GIL, not the cores, bounds a batch of small Examples: every thread
needs it between its native calls, and the loop needs it for its own side. This runs a loop of
``--epochs`` epochs (``set_epoch`` each) over one dataset of bench_dataset.py's ``35B`` or
``4KB`` set (batch 256, global shuffle), through ``DataLoader(batch_size=None)`` and iterating
the dataset itself, each under ``py-spy record --gil`` (it samples only the thread holding the
GIL), and prints for each what share of the samples taken while the epochs ran each part of the
work had, and how much of the epochs' wall time the GIL was held at least (samples / rate /
seconds: a sampler that falls behind its rate takes fewer samples, never more).

    python benchmarks/bench_gil.py [--kind 35B] [--threads 2] [--epochs 60] [--dir DIR]

Needs py-spy (``pip install py-spy``) and leave to trace a child process (root, or
``kernel.yama.ptrace_scope`` 0). The parts are named by the functions on the sampled stack (the
first rule that matches, in :data:`PARTS`' order); a sample outside the epochs (imports, the
dataset's construction) is left out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dataset import BATCH, VS_TF_SPECS, make_vs_tf_data

RATE = 2000  # samples a second

# (part, the functions all of which the stack holds), in order: the first match names a sample.
PARTS = [
    ("loading: the epoch's plan (the next run's ids)", ("Thread._bootstrap", "_take (", "_loads (")),
    ("loading: taking a task (its locks)", ("Thread._bootstrap", "_take (")),
    ("loading: the read's Python (its call, the shard pool)", ("Thread._bootstrap", "read_framed (")),
    ("loading: the decode's Python (its call, a tensor a column)", ("Thread._bootstrap", "decode_framed (")),
    ("loading: the rest of a run's read and decode", ("Thread._bootstrap", "_decode_natively (")),
    ("loading: cutting a run into batches", ("Thread._bootstrap", "BatchDecoder.batches (")),
    ("loading: a run's bookkeeping", ("Thread._bootstrap", "loads (")),
    ("loading: the hand-off (results, wake-ups)", ("Thread._bootstrap",)),
    ("loop: the DataLoader's record_function (torch's profiler hook)", ("record_function",)),
    ("loop: the dataset's iterator (the epoch driver, a run's batches)", ("_iterate (",)),
    ("loop: the DataLoader's other per-batch code", ("dataloader.py",)),
    ("loop: other", ()),
]

_LOOP = """
import json, sys, time
import torch
from torch.utils.data import DataLoader
import torch_tfrecord as tt
sys.path.insert(0, sys.argv[1])
from bench_dataset import VS_TF_SPECS
kind, paths, threads, epochs, wrapped, size = sys.argv[2], json.loads(sys.argv[3]), *map(int, sys.argv[4:8])
torch.set_num_threads(1)
ds = tt.TFRecordDataset(paths, spec=VS_TF_SPECS[kind], batch_size=size, shuffle="global", threads=threads)

def run_epochs():
    batches = 0
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in DataLoader(ds, batch_size=None) if wrapped else ds:
            batches += 1
    return batches

start = time.perf_counter()
batches = run_epochs()
print("epochs:", time.perf_counter() - start, batches)
"""


def profile(
    kind: str, paths: list[str], threads: int, epochs: int, wrapped: bool
) -> tuple[float, int, dict[str, int]]:
    """The epochs' wall seconds, their batches, and the samples of each part (none outside them)."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        sys.exit("needs py-spy: pip install py-spy")
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as scratch:
        raw = os.path.join(scratch, "gil.txt")
        args = [here, kind, json.dumps(paths), str(threads), str(epochs), str(int(wrapped)), str(BATCH)]
        command = [py_spy, "record", "--gil", "-r", str(RATE), "-f", "raw", "-o", raw, "--"]
        done = subprocess.run(
            [*command, sys.executable, "-c", _LOOP, *args], capture_output=True, text=True, check=True
        )
        seconds, batches = next(
            line.split()[1:] for line in done.stdout.splitlines() if line.startswith("epochs:")
        )
        parts: dict[str, int] = collections.Counter()
        with open(raw) as lines:
            for line in lines:
                stack, _, count = line.rstrip().rpartition(" ")
                if "Thread._bootstrap" not in stack and "run_epochs (" not in stack:
                    continue  # not the epochs: the imports, the dataset's construction
                name = next(part for part, needs in PARTS if all(need in stack for need in needs))
                parts[name] += int(count)
    return float(seconds), int(batches), parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--kind", default="35B", choices=sorted(VS_TF_SPECS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    paths = make_vs_tf_data(directory, args.kind)
    found = {}
    for wrapped in (True, False):
        found[wrapped] = profile(args.kind, paths, args.threads, args.epochs, wrapped)
    load = os.getloadavg()
    print(f"{args.kind}, threads={args.threads}, {args.epochs} epochs, load average {load[0]:.2f} "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")  # fmt: skip
    print(f"{'share of the GIL samples':66} {'DataLoader':>11} {'itself':>8}")
    for part, _ in PARTS:
        shares = [100 * found[w][2].get(part, 0) / max(1, sum(found[w][2].values())) for w in (True, False)]
        print(f"{part:66} {shares[0]:>10.1f}% {shares[1]:>7.1f}%")
    held = [100 * sum(found[w][2].values()) / RATE / found[w][0] for w in (True, False)]
    name = "the GIL held, at least (its samples / rate / the epochs' seconds)"
    print(f"{name:66} {held[0]:>10.0f}% {held[1]:>7.0f}%")
    wall = [1000 * found[w][0] / found[w][1] for w in (True, False)]
    print(f"{'wall ms a batch (under the sampler)':66} {wall[0]:>11.3f} {wall[1]:>8.3f}")

if __name__ == "__main__":
    main()
