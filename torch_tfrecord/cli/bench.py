"""``torch-tfrecord bench SOURCES``: the dataset alone, as fast as it loads, for a few seconds; then
the table of ``dataset.stats()``: what to run before blaming the loader (or the model). With
``--compare``: the main process alone, its loading threads, one loading process and DataLoader
workers on the same data, and which to use (``--step-ms``: with a training step that holds the GIL)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any

from ..errors import SpecError
from .options import add_command, add_storage_options, storage_options

__all__ = ["add_bench_command"]

_HELP = (
    "load a dataset alone for a few seconds, with no training step, and print where the time goes "
    "(the table of dataset.stats(): records/s, each stage per batch, the bottleneck)"
)
_EXAMPLES = (
    "torch-tfrecord bench 'data/train-*.tfrecord' --workers 4 --batch-size 256\n"
    "torch-tfrecord bench 'data/train-*.tfrecord' --threads 4\n"
    "torch-tfrecord bench 'data/train-*.tfrecord' --compare\n"
    "torch-tfrecord bench 'data/train-*.tfrecord' --compare --step-ms 5\n"
    'torch-tfrecord bench data/ --spec \'{"label": "int"}\' --trace load.json'
)


def add_bench_command(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds ``bench`` to ``commands``; returns its parser."""
    bench = add_command(commands, "bench", _HELP, _EXAMPLES)
    bench.add_argument("sources", nargs="+", help="data files, globs, directories or URLs")
    bench.add_argument("--workers", type=int, default=0, help="DataLoader workers (default: 0)")
    bench.add_argument(
        "--threads", type=int, default=0, help="the dataset's loading threads, with no workers (default: 0)"
    )
    bench.add_argument(
        "--compare",
        action="store_true",
        help="load with the main process alone, with N loading threads, with N loading threads in one "
        "loading process and with N DataLoader workers (N: --threads, else the cores this process may "
        "use), --seconds each, and say which is fastest",
    )
    bench.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="a training step of this many milliseconds after each batch, holding the GIL as a "
        "Python-heavy step does (default: 0, no step)",
    )
    bench.add_argument("--batch-size", type=int, default=256, help="records per batch (default: 256)")
    bench.add_argument(
        "--spec",
        help="the feature spec: a spec.json file or its JSON, or JSON of shorthands such as "
        '\'{"label": "int"}\' (default: the spec saved beside the shards, else every feature)',
    )
    bench.add_argument("--seconds", type=float, default=5.0, help="how long to load (default: 5)")
    bench.add_argument(
        "--shuffle", default="global", help="global, shards, block:K or false (default: global)"
    )
    bench.add_argument("--trace", metavar="PATH", help="also write a Chrome / Perfetto trace of the run")
    add_storage_options(bench)
    bench.set_defaults(run=cmd_bench)
    return [bench]


def _spec(text: str | None) -> dict[str, Any]:
    """The dataset's spec arguments from ``--spec`` (a file's path, or JSON)."""
    if text is None:
        return {}
    from ..codec.spec_file import decode_spec_json

    source = "--spec"
    if os.path.isfile(text):
        source = text
        with open(text, encoding="utf-8") as file:
            text = file.read()
    decoded = decode_spec_json(text, source)
    if decoded is not None:
        return dict(decoded)
    spec = json.loads(text)  # (decode_spec_json raised already if it is not JSON)
    if not isinstance(spec, dict):
        raise SpecError(f"{source}: a spec is a JSON object of feature key to shorthand, got {text!r}")
    return {"spec": spec}


def cmd_bench(args: argparse.Namespace) -> int:
    import torch
    from torch.utils.data import DataLoader

    from ..data.dataset import TFRecordDataset
    from ..data.order.plan import Shuffle

    if args.workers < 0 or args.threads < 0 or args.batch_size < 1 or args.seconds <= 0 or args.step_ms < 0:
        raise ValueError(
            "--workers, --threads and --step-ms must be >= 0, --batch-size >= 1 and --seconds > 0"
        )
    if args.workers and args.threads:
        raise ValueError("--threads are the main process's loading threads: give --workers 0 with them")
    torch.set_num_threads(1)
    shuffle: Shuffle = False if args.shuffle.lower() in ("false", "no", "none") else args.shuffle

    def make(threads: int, process: bool = False) -> TFRecordDataset:
        return TFRecordDataset(
            args.sources if len(args.sources) > 1 else args.sources[0],
            batch_size=args.batch_size,
            shuffle=shuffle,
            drop_last=False,
            storage_options=storage_options(args),
            threads=threads,
            process=process,
            **_spec(args.spec),
        )

    if args.compare:
        return _compare(make, args.threads or _cores(), args.seconds, args.step_ms)
    dataset = make(args.threads)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers)
    with dataset.trace(args.trace) if args.trace else contextlib.nullcontext():
        _load(dataset, loader, args.seconds, args.step_ms)
        print(dataset.stats())
    if args.trace:
        print(f"trace: {args.trace} (open it in https://ui.perfetto.dev)")
    return 0


def _load(dataset: Any, loader: Any, seconds: float, step_ms: float = 0.0) -> int:
    """Epoch after epoch of ``loader`` for ``seconds``, each batch followed by a step of
    ``step_ms`` holding the GIL; the records loaded."""
    deadline = time.monotonic() + seconds
    epoch, batches, records = 0, 1, 0
    while batches and time.monotonic() < deadline:  # (an empty dataset: one pass)
        dataset.set_epoch(epoch)
        batches = 0
        for batches, batch in enumerate(loader, 1):  # noqa: B007 - (the count is read after the loop)
            records += len(batch["_record_id"])
            if step_ms:  # a Python-heavy training step: the GIL held but for the switch interval
                until = time.perf_counter() + step_ms / 1000
                while time.perf_counter() < until:
                    pass
            if time.monotonic() >= deadline:
                break
        epoch += 1
    return records


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _compare(make: Any, count: int, seconds: float, step_ms: float) -> int:
    """Records/s of the main process alone, of ``count`` loading threads (in this process, then in
    one loading process) and of ``count`` workers, each batch followed by a ``step_ms`` step."""
    from torch.utils.data import DataLoader

    main = "main process alone (threads=0)"
    modes = {  # name: (threads, process, workers)
        main: (0, False, 0),
        f"threads={count}": (count, False, 0),
        f"threads={count}, process=True": (count, True, 0),
        f"DataLoader(num_workers={count})": (0, False, count),
    }
    advice = {
        main: "the default (DataLoader(dataset, batch_size=None))",
        f"threads={count}": f"TFRecordDataset(..., threads={count}), DataLoader(dataset, batch_size=None)",
        f"threads={count}, process=True": f"TFRecordDataset(..., threads={count}, process=True), "
        "DataLoader(dataset, batch_size=None)",
        f"DataLoader(num_workers={count})": f"DataLoader(dataset, batch_size=None, num_workers={count}, "
        "persistent_workers=True)",
    }
    rates = {}
    for name, (threads, process, workers) in modes.items():
        dataset = make(threads, process)
        start = time.monotonic()
        # (workers that stay up between epochs, as a training run keeps them)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
        records = _load(dataset, loader, seconds, step_ms)
        rates[name] = records / (time.monotonic() - start)
    base = rates[main] or 1.0
    step = f"a {step_ms:g} ms training step" if step_ms else "no training step"
    print(f"{f'loader ({step})':34} {'records/s':>12} {'x main process':>15}")
    for name, rate in rates.items():
        print(f"{name:34} {rate:>12,.0f} {rate / base:>15.2f}")
    best = max(rates, key=rates.__getitem__)
    if step_ms:
        caveat = "Measured with a step holding the GIL for the time given (--step-ms)."
    else:
        caveat = (
            "With a training step that holds the GIL (Python-heavy), the loading process or workers "
            "may win where threads would wait for it: measure with --step-ms; see the performance guide."
        )
    print(f"fastest here: {best}: {advice[best]}. {caveat}")
    return 0
