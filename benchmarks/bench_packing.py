"""Packing token sequences: ours (tt.pack's planner and row assembly) against grain's packers, same run.

C4-like sequences: lengths log-normal with a median of 400 tokens (sigma 1.0), int64 tokens, rows
of 2048 tokens; sequences longer than a row are truncated to it for every packer (grain's packers
require it, seqio's trim_and_pack trims), except in the "split_long" row. Every packer makes
every row of one epoch, with its segment ids and positions:

- grain first_fit / best_fit: ``grain.experimental.FirstFitPackIterDataset`` /
  ``BestFitPackIterDataset`` (``num_packing_bins`` = the buffer, ``shuffle_bins=False``) over a
  ``MapDataset`` of the sequences in memory;
- ours first_fit / best_fit / concat: ``grouping.packing.plan_packing`` (the epoch's rows from the
  lengths) and ``grouping.packed_rows.assemble_rows`` 64 rows at a time (what a worker of ``tt.pack`` does
  per batch, without reading), over the same sequences in memory;
- seqio trim_and_pack (with ``--seqio-python``, a Python with seqio and TensorFlow):
  ``seqio.utils.trim_and_pack_dataset(ds, {"targets": 2048})`` over
  ``tf.data.Dataset.from_tensor_slices`` of the sequences (a RaggedTensor), iterated as numpy;
- ours end to end: ``tt.pack(tt.TFRecordDataset(shards), 2048, ["targets"], batch_size=64)`` over the
  same sequences written to 4 shards (files in the page cache): reading, decoding, packing and
  assembling one epoch in the main process; building the dataset (the shards' index scan and
  the lengths table, once) is timed apart ("built in").

fill = real tokens / row tokens; tokens/s = real tokens / seconds; "x grain" = tokens/s over
grain first_fit's at the same buffer. Medians of ``--repeats``. grain is imported when installed
(``pip install grain`` in a venv that sees this package: see benchmarks/README.md).

    python benchmarks/bench_packing.py [--sequences 100000] [--buffer 64 512] [--repeats 3] [--dir DIR]
        [--seqio-python /tmp/seqio/bin/python] [--no-grain]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _tensorflow import run_script

import torch_tfrecord as tt
from torch_tfrecord.data.grouping.group_datasets import Pieces
from torch_tfrecord.data.grouping.packed_rows import assemble_rows
from torch_tfrecord.data.grouping.packing import PackOptions, plan_packing

LENGTH, MEDIAN, SIGMA, ROWS_AT_ONCE, SHARDS = 2048, 400, 1.0, 64, 4


def c4_like(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Lengths (untruncated) and the tokens of ``count`` sequences, one flat array."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(MEDIAN), SIGMA, count))).astype(np.int64)
    return lengths, rng.integers(1, 32_000, int(lengths.sum()), dtype=np.int64)


def ours(
    values: np.ndarray, lengths: np.ndarray, method: str, buffer: int, split_long: bool = False
) -> tuple[int, int]:
    """Every row of an epoch: (real tokens, rows)."""
    packed = plan_packing(lengths[:, None], PackOptions((LENGTH,), method, buffer, split_long=split_long))  # type: ignore[arg-type]
    rows = packed.rows
    columns = {"targets": (values, lengths)}
    real = 0
    for first in range(0, rows.count, ROWS_AT_ONCE):
        chosen = np.arange(first, min(rows.count, first + ROWS_AT_ONCE))
        owner, sequences, starts, stops = rows.pieces(chosen)
        # The sequences are all in memory here: each piece reads its sequence in the flat array.
        pieces = Pieces(owner, sequences, np.arange(len(sequences)), starts, stops)
        batch = assemble_rows(_gathered(columns, sequences), ["targets"], [LENGTH], pieces, len(chosen), 0)
        real += int((batch["targets_segment_ids"] > 0).sum())
    return real, rows.count


def _gathered(columns: dict[str, tuple[np.ndarray, np.ndarray]], sequences: np.ndarray) -> dict[str, Any]:
    """The sequences' tokens as a column (what the dataset's read gives): one gather."""
    values, lengths = columns["targets"]
    starts = np.cumsum(lengths) - lengths
    counts = lengths[sequences]
    index = np.repeat(starts[sequences] - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    return {"targets": (values[index], counts)}


def grain_packer(values: np.ndarray, lengths: np.ndarray, method: str, buffer: int) -> tuple[int, int]:
    import grain

    starts = np.cumsum(lengths) - lengths
    sequences = [{"targets": values[s : s + n]} for s, n in zip(starts.tolist(), lengths.tolist())]
    source = grain.MapDataset.source(sequences).to_iter_dataset()
    kind = (
        grain.experimental.FirstFitPackIterDataset
        if method == "first_fit"
        else grain.experimental.BestFitPackIterDataset
    )
    packed = kind(source, length_struct={"targets": LENGTH}, num_packing_bins=buffer, shuffle_bins=False)
    real = rows = 0
    for row in packed:
        real += int((row["targets_segment_ids"] > 0).sum())
        rows += 1
    return real, rows


_SEQIO_SCRIPT = """
import statistics, sys, time
import numpy as np, seqio, tensorflow as tf
data = np.load(sys.argv[1])
values, lengths, repeats = data["values"], data["lengths"], int(sys.argv[2])
times = []
for _ in range(repeats):
    start = time.perf_counter()
    sequences = tf.RaggedTensor.from_row_lengths(values, lengths)
    ds = tf.data.Dataset.from_tensor_slices({"targets": sequences})
    packed = seqio.utils.trim_and_pack_dataset(ds, {"targets": %d})
    rows = real = 0
    for row in packed.as_numpy_iterator():
        rows += 1
        real += int(np.count_nonzero(row["targets_segment_ids"]))
    times.append(time.perf_counter() - start)
print(rows, real, statistics.median(times))
"""


def seqio_packer(
    python: str, folder: Path, values: np.ndarray, lengths: np.ndarray, repeats: int
) -> tuple[int, int, float, float]:
    """seqio's trim_and_pack in ``python`` (a venv with seqio): (real tokens, rows, 0, median seconds)."""
    path = folder / "sequences.npz"
    np.savez(path, values=values, lengths=lengths)
    rows, real, seconds = run_script(python, _SEQIO_SCRIPT % LENGTH, str(path), str(repeats))
    return int(real), int(rows), 0.0, float(seconds)


def write_shards(folder: Path, values: np.ndarray, lengths: np.ndarray) -> list[str]:
    starts = np.cumsum(lengths) - lengths
    cuts = np.linspace(0, len(lengths), SHARDS + 1).astype(int)
    paths = []
    for shard in range(SHARDS):
        path = folder / f"c4like-{len(lengths)}-{shard:05d}-of-{SHARDS:05d}.tfrecord"
        paths.append(str(path))
        if path.exists():
            continue
        with tt.ExampleWriter(path) as writer:
            for record in range(cuts[shard], cuts[shard + 1]):
                writer.write(
                    {"targets": tt.Int64List(values[starts[record] : starts[record] + lengths[record]])}
                )
    return paths


def end_to_end(paths: list[str], buffer: int) -> tuple[int, int, float, float]:
    """One epoch of tt.pack over the shards: (real tokens, rows, seconds to build the dataset
    (the index scan and the lengths table), seconds of the epoch)."""
    start = time.perf_counter()
    source = tt.TFRecordDataset(paths, spec={"targets": "int"})
    dataset = tt.pack(
        source, LENGTH, ["targets"], buffer_size=buffer, split_long=True, batch_size=ROWS_AT_ONCE, prefetch=0
    )
    built = time.perf_counter() - start
    real = rows = 0
    start = time.perf_counter()
    for batch in dataset:  # counted in numpy (torch's reductions start its thread pool); no padding row
        real += int(np.count_nonzero(batch["targets_segment_ids"].numpy()))
        rows += len(batch["_padding"]) - int(np.count_nonzero(batch["_padding"].numpy()))
    return real, rows, built, time.perf_counter() - start


def timed(run: Callable[[], tuple[Any, ...]], repeats: int) -> tuple[float, tuple[Any, ...]]:
    """The median seconds of ``run`` (or of what it times itself: its result's last), its last result."""
    seconds, result = [], ()
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        seconds.append(result[3] if len(result) > 3 else time.perf_counter() - start)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=100_000)
    parser.add_argument("--buffer", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-grain", action="store_true", help="leave grain out (not installed)")
    parser.add_argument("--seqio-python", help="a Python with seqio (and TensorFlow), to time trim_and_pack")
    args = parser.parse_args()
    lengths, values = c4_like(args.sequences)
    trimmed = np.minimum(lengths, LENGTH)
    starts = np.cumsum(lengths) - lengths  # truncated sequences keep their first LENGTH tokens
    index = np.repeat(starts, trimmed) + (
        np.arange(int(trimmed.sum())) - np.repeat(np.cumsum(trimmed) - trimmed, trimmed)
    )
    trimmed_values = values[index]
    print(
        f"{args.sequences} sequences, median {int(np.median(lengths))} tokens, mean {lengths.mean():.0f}, "
        f"{(lengths > LENGTH).mean():.1%} longer than a row of {LENGTH}; {int(trimmed.sum()):,} tokens "
        "once truncated"
    )
    header = ("packer", "buffer", "rows", "fill", "median s", "tokens/s", "x grain")
    print("{:<30} {:>6} {:>8} {:>7} {:>9} {:>13} {:>8}".format(*header))
    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_packing_"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_shards(folder, values, lengths)
    for buffer in args.buffer:
        runs: dict[str, Callable[[], tuple[Any, ...]]] = {}
        if not args.no_grain:
            for method in ("first_fit", "best_fit"):
                runs[f"grain {method}"] = lambda m=method: grain_packer(trimmed_values, trimmed, m, buffer)
        if args.seqio_python and buffer == args.buffer[0]:  # seqio's packer has no buffer to set
            runs["seqio trim_and_pack"] = lambda: seqio_packer(
                args.seqio_python, folder, trimmed_values, trimmed, 1
            )
        for method in ("first_fit", "best_fit", "concat"):
            runs[f"ours {method}"] = lambda m=method: ours(trimmed_values, trimmed, m, buffer)
        runs["ours first_fit, split_long"] = lambda: ours(
            values, lengths, "first_fit", buffer, split_long=True
        )
        runs["ours end to end, split_long"] = lambda: end_to_end(paths, buffer)
        reference = None
        for name, run in runs.items():
            seconds, result = timed(run, args.repeats)
            real, rows = result[0], result[1]
            rate = real / seconds
            if name == "grain first_fit":
                reference = rate
            ratio = f"{rate / reference:8.2f}" if reference else f"{'-':>8}"
            extra = f"   built in {result[2]:.2f} s" if len(result) > 2 and result[2] else ""
            fill = real / (rows * LENGTH)
            print(
                f"{name:<30} {buffer:>6} {rows:>8} {fill:>7.4f} {seconds:>9.3f} {rate:>13,.0f} {ratio}{extra}"
            )


if __name__ == "__main__":
    main()
