"""``torch-tfrecord bench SOURCES``: the dataset alone, as fast as it loads, for a few seconds; then
the table of ``dataset.stats()``: what to run before blaming the loader (or the model)."""

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
    'torch-tfrecord bench data/ --spec \'{"label": "int"}\' --trace load.json'
)


def add_bench_command(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds ``bench`` to ``commands``; returns its parser."""
    bench = add_command(commands, "bench", _HELP, _EXAMPLES)
    bench.add_argument("sources", nargs="+", help="data files, globs, directories or URLs")
    bench.add_argument("--workers", type=int, default=0, help="DataLoader workers (default: 0)")
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
    from ..data.order import Shuffle

    if args.workers < 0 or args.batch_size < 1 or args.seconds <= 0:
        raise ValueError("--workers must be >= 0, --batch-size >= 1 and --seconds > 0")
    torch.set_num_threads(1)
    shuffle: Shuffle = False if args.shuffle.lower() in ("false", "no", "none") else args.shuffle
    dataset = TFRecordDataset(
        args.sources if len(args.sources) > 1 else args.sources[0],
        batch_size=args.batch_size,
        shuffle=shuffle,
        drop_last=False,
        storage_options=storage_options(args),
        **_spec(args.spec),
    )
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers)
    with dataset.trace(args.trace) if args.trace else contextlib.nullcontext():
        deadline = time.monotonic() + args.seconds
        epoch, batches = 0, 1
        while batches and time.monotonic() < deadline:  # (an empty dataset: one pass)
            dataset.set_epoch(epoch)
            batches = 0
            for batches, _ in enumerate(loader, 1):  # noqa: B007 - (the count is read after the loop)
                if time.monotonic() >= deadline:
                    break
            epoch += 1
        print(dataset.stats())
    if args.trace:
        print(f"trace: {args.trace} (open it in https://ui.perfetto.dev)")
    return 0
