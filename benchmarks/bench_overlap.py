"""Loading that overlaps training with num_workers=0: TFRecordDataset(prefetch=N) under a simulated step.

A training loop in the main process, ``for batch in DataLoader(ds, batch_size=None): step()``,
where ``step()`` releases the GIL and lasts ``--step-ms`` or, by default, the loading time per
batch (the case where overlapping matters most, as the loop today takes their sum), of two
kinds: torch work on the CPU (a loop of 256x256 float matmuls on one thread), and a sleep, which
is what the CPU does while a GPU runs the step (it waits, with the GIL released); and where CUDA
is available, two real GPU steps: ``cuda-launch`` (a small model's training steps: the CPU busy
launching kernels) and ``cuda-gpu`` (long kernels: the CPU waits), see make_cuda_step. Two datasets:

- records: 4 shards x 20,000 Examples of ~4 KB {data: 4,096 bytes, label, 16 floats} (the data
  of ``bench_dataset.py --tf-python``), batches of 256, global shuffle;
- images (``--images N``, 0 to skip): N synthetic 640x480 JPEGs (``bench_images.py``'s), 4
  shards, ``tt.Image("RGB", size=224)``, batches of 32.

Per dataset, in interleaved rounds (medians), ms per batch: loading alone (prefetch=0), and per
kind of step the step alone, the loop today (prefetch=0) and with prefetch=1, 2 and 4; each loop against
max(step, loading) (the target: at most 1.1x) and against their sum. Then how long the loading
holds the GIL per batch: a pure-Python counter runs in the main thread while a thread loads;
the share of its rate that it loses is the share of the time the loading thread held the GIL.

    python benchmarks/bench_overlap.py [--dir DIR] [--rounds 3] [--step-ms MS] [--images 512]
        [--steps sleep,cuda-launch,cuda-gpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dataset import VS_TF_SPECS, make_vs_tf_data
from bench_images import make_data

import torch_tfrecord as tt

PREFETCH = (1, 2, 4)
Make = Callable[[int], tt.TFRecordDataset]  # a dataset with the given prefetch
_A = torch.randn(256, 256)


def matmuls_per_ms() -> float:
    """Calibrates the step: 256x256 matmuls per millisecond on one thread (best of 5)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(50):
            torch.mm(_A, _A)
        best = min(best, time.perf_counter() - start)
    return 50 / (best * 1000)


Step = Callable[[Any], None]  # one training step on a batch


def make_step(ms: float, rate: float) -> Step:
    count = max(1, round(ms * rate))

    def step(batch: Any) -> None:
        for _ in range(count):
            torch.mm(_A, _A)

    return step


def make_cuda_step(ms: float, batch: Any, bound: str) -> Step:
    """A step on the GPU lasting about ``ms``: the batch's first tensor of 2 or more dimensions
    copied to the device, then, ``bound="launch"``: a small conv net (images) or MLP (records),
    forward, backward and SGD update, repeated (many small kernels: the CPU thread launching them
    is busy, holding the GIL, as with a small model); ``bound="gpu"``: bf16 4096x4096 matmuls
    (few long kernels: the CPU waits, as with a large model); then synchronise (as ``loss.item()``)."""
    example = next(v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() >= 2)
    key = next(k for k, v in batch.items() if v is example)
    if example.dim() == 4:
        model: torch.nn.Module = torch.nn.Sequential(
            torch.nn.Conv2d(example.shape[1], 32, 3, stride=2), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
        )  # fmt: skip
    else:
        model = torch.nn.Sequential(
            torch.nn.Linear(example.shape[1], 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
        )
    model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    big = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def once(x: torch.Tensor) -> None:
        if bound == "gpu":
            torch.mm(big, big)
            return
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def prepare(batch: Any) -> torch.Tensor:
        return batch[key].to("cuda", non_blocking=True).float()

    x = prepare(batch)
    for _ in range(3):
        once(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        once(x)
    torch.cuda.synchronize()
    repeats = max(1, round(ms / (100 * (time.perf_counter() - start))))

    def step(batch: Any) -> None:
        x = prepare(batch)
        for _ in range(repeats):
            once(x)
        torch.cuda.synchronize()

    return step


def loader(make: Make, prefetch: int) -> DataLoader[Any]:
    return DataLoader(make(prefetch), batch_size=None, num_workers=0)


def timed_loop(
    make: Callable[[int], tt.TFRecordDataset], prefetch: int, step: Step | None
) -> tuple[float, int]:
    batches = 0
    start = time.perf_counter()
    for batch in loader(make, prefetch):
        if step is not None:
            step(batch)
        batches += 1
    return time.perf_counter() - start, batches


def timed_steps(step: Step, batch: Any, batches: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        step(batch)
    return time.perf_counter() - start


def gil_share(make: Make) -> tuple[float, float, int]:
    """(share of the time the loading thread holds the GIL, its seconds, batches): a Python
    counter in this thread, alone and while a thread loads one epoch."""

    def spin(seconds: float, stop: threading.Event | None = None) -> float:
        count, start = 0, time.perf_counter()
        while (stop is None and time.perf_counter() - start < seconds) or (
            stop is not None and not stop.is_set()
        ):
            for _ in range(1000):
                count += 1
        return count / (time.perf_counter() - start)

    alone = spin(0.5)
    done = threading.Event()
    result: list[Any] = []

    def load() -> None:
        result.append(timed_loop(make, 0, None))
        done.set()

    thread = threading.Thread(target=load)
    thread.start()
    shared = spin(0, done)
    thread.join()
    seconds, batches = result[0]
    return max(0.0, 1 - shared / alone), seconds, batches


def measure(name: str, make: Make, args: argparse.Namespace, rate: float) -> None:
    timed_loop(make, 0, None)  # warm-up: page cache, codec threads
    load_s, batches = timed_loop(make, 0, None)
    step_ms = args.step_ms if args.step_ms else 1000 * load_s / batches
    steps: dict[str, Step] = {
        "matmul": make_step(step_ms, rate),
        "sleep": lambda _: time.sleep(step_ms / 1000),
    }
    first = next(iter(loader(make, 0)))
    if torch.cuda.is_available():
        steps["cuda-launch"] = make_cuda_step(step_ms, first, "launch")
        steps["cuda-gpu"] = make_cuda_step(step_ms, first, "gpu")
    if args.steps:
        steps = {kind: step for kind, step in steps.items() if kind in args.steps.split(",")}
    rows: list[tuple[str, Callable[[], float]]] = [("loading alone", lambda: timed_loop(make, 0, None)[0])]
    for kind, step in steps.items():
        rows.append((f"{kind} step alone", lambda step=step: timed_steps(step, first, batches)))  # type: ignore[misc]
        for prefetch in (0, *PREFETCH):
            label = f"{kind} loop, prefetch={prefetch}" + (" (today)" if prefetch == 0 else "")
            rows.append((label, lambda p=prefetch, s=step: timed_loop(make, p, s)[0]))  # type: ignore[misc]
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for label, function in rows:
            times.setdefault(label, []).append(1000 * function() / batches)
    ms = {label: statistics.median(values) for label, values in times.items()}
    print(f"\n{name}: {batches} batches, steps sized to {step_ms:.2f} ms, {args.rounds} rounds, medians")
    print(f"{'':34} {'ms/batch':>9} {'x max(step, load)':>18} {'x sum':>6}")
    for label, value in ms.items():
        step_alone = ms[f"{label.split()[0]} step alone"] if " " in label and "loop" in label else 0.0
        if step_alone:
            bound, total = max(ms["loading alone"], step_alone), ms["loading alone"] + step_alone
            print(f"{label:34} {value:>9.2f} {value / bound:>18.2f} {value / total:>6.2f}")
        else:
            print(f"{label:34} {value:>9.2f}")
    share, seconds, n = gil_share(make)
    held = 1000 * share * seconds / n
    print(f"GIL held by the loading: {100 * share:.0f}% of its time, ~{held:.2f} ms per batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=0.0, help="0: the loading time per batch")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument(
        "--steps", default="", help="kinds of step, e.g. sleep,cuda (default: every one here)"
    )
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    torch.set_num_threads(1)  # the step on one core; the loading thread (and codec threads) beside it
    rate = matmuls_per_ms()
    paths = make_vs_tf_data(directory, "4KB")
    measure(
        "records, 4 KB x 256",
        lambda p: tt.TFRecordDataset(paths, spec=VS_TF_SPECS["4KB"], batch_size=256, prefetch=p),
        args,
        rate,
    )
    if args.images:
        _, shards = make_data(os.path.join(directory, f"images-{args.images}"), args.images)
        spec = {"image/encoded": tt.Image("RGB", size=224), "image/class/label": tt.FixedLen((), torch.int64)}
        measure(
            "images, tt.Image('RGB', size=224) x 32",
            lambda p: tt.TFRecordDataset(shards, spec=spec, batch_size=32, prefetch=p),
            args,
            rate,
        )


if __name__ == "__main__":
    main()
