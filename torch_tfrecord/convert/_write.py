"""Writing converted records: splits, shards, parallel encoding, a progress bar, all or nothing.

A converter hands over a list of *tasks* (one per record to be, in a fixed order) and a
picklable function that turns a task into a serialized Example or raises
:class:`ConversionError`. This module splits the tasks (seeded), assigns them to shards
(contiguous runs, so shard contents depend only on the input), encodes them in worker
processes in order, and writes each shard atomically. Every shard stays under its temporary
name until the whole conversion has succeeded: a failed conversion leaves nothing under a
final name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..errors import TFRecordError
from ..records.io import StorageOptions, is_url, join
from ..records.manifest import write_shards_manifest
from ..records.writer import RecordWriter, ShardedRecordWriter, WriteCompression
from ..support.processes import worker_processes
from ..support.text import progress_bar

__all__ = [
    "ConversionError",
    "ConversionResult",
    "WriteOptions",
    "shard_options",
    "write_records",
    "write_stream",
]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]


class ConversionError(TFRecordError, ValueError):
    """An input record that cannot be converted; the message names the file and the record."""


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """Where and how converted records are written.

    Args:
        out_dir: directory (or URL prefix) for the shards and ``label_map.pbtxt``.
        name: shard name prefix: ``{name}-{split}-00000-of-00004.tfrecord``.
        shards: shards per split; or
        max_records_per_shard: start a new shard after this many records (default 1024).
        split: ``{"train": 0.8, "val": 0.2}``: ratios, shuffled with ``seed``; None: one set.
        seed: seed of the split.
        jobs: encoding processes (1: this process). They are spawned, not forked: a script
            that converts with ``jobs > 1`` does so under ``if __name__ == "__main__":``.
        on_error: ``"raise"`` stops at the first bad record (nothing written under a final
            name); ``"skip"`` leaves bad records out, counts them and logs each.
        progress: show a tqdm progress bar on stderr (when tqdm is installed).
        storage_options: for the fsspec file system when ``out_dir`` is a URL.
        compression: None, ``"gzip"`` or ``"zlib"`` (shards ``.tfrecord.gz`` / ``.tfrecord.zz``).
    """

    out_dir: str
    name: str = "data"
    shards: int | None = None
    max_records_per_shard: int | None = None
    split: Mapping[str, float] | None = None
    seed: int = 0
    jobs: int = 1
    on_error: OnError = "raise"
    progress: bool = False
    storage_options: StorageOptions = None
    compression: WriteCompression = None

    def __post_init__(self) -> None:
        if self.shards is not None and self.max_records_per_shard is not None:
            raise ValueError("give shards or max_records_per_shard, not both")
        if self.shards is not None and self.shards < 1:
            raise ValueError(f"{self.shards=} must be positive")
        if self.max_records_per_shard is not None and self.max_records_per_shard < 1:
            raise ValueError(f"{self.max_records_per_shard=} must be positive")
        if self.jobs < 1:
            raise ValueError(f"{self.jobs=} must be positive")
        if self.compression not in (None, "gzip", "zlib"):
            raise ValueError(f"{self.compression=} must be None, 'gzip' or 'zlib'")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"{self.on_error=} must be 'raise' or 'skip'")
        if not self.name or "/" in self.name:
            raise ValueError(f"{self.name=} must be a plain file name prefix")
        if self.split is not None:
            if not self.split or any(not r > 0 for r in self.split.values()):
                raise ValueError(f"split ratios must be positive, got {dict(self.split)}")
            if abs(sum(self.split.values()) - 1) > 1e-6:
                raise ValueError(f"split ratios must add up to 1, got {dict(self.split)}")


def shard_options(
    out_dir: str | os.PathLike[str],
    name: str,
    shard_size: int | None,
    compression: WriteCompression,
    progress: bool,
    storage_options: StorageOptions,
    /,
    **more: Any,
) -> WriteOptions:
    """The :class:`WriteOptions` of a writer whose public arguments say ``shard_size`` and take
    any path (``tt.write_dataset``, ``tt.from_parquet``); ``more`` are the other fields."""
    return WriteOptions(
        out_dir=os.fspath(out_dir),
        name=name,
        max_records_per_shard=shard_size,
        compression=compression,
        progress=progress,
        storage_options=storage_options,
        **more,
    )


@dataclasses.dataclass
class ConversionResult:
    """What a conversion wrote.

    Attributes:
        shards: shard paths per split (``""`` when there is no split).
        records: records written per split.
        skipped: the message of each input left out (``on_error="skip"``).
        label_map: the label map file written, if any.
        spec: the spec that reads the records (:func:`torch_tfrecord.write_dataset`), if known.
        spec_path: the ``spec.json`` it was saved as, if any.
    """

    shards: dict[str, list[str]]
    records: dict[str, int]
    skipped: list[str]
    label_map: str | None = None
    spec: dict[str, Any] | None = None
    spec_path: str | None = None

    @property
    def total(self) -> int:
        return sum(self.records.values())


def split_tasks(count: int, split: Mapping[str, float] | None, seed: int) -> dict[str, list[int]]:
    """Which task indices go to each split: a seeded permutation cut by the ratios (each split's
    indices in input order). Pure: the same count, ratios and seed give the same split."""
    if split is None:
        return {"": list(range(count))}
    order = np.random.default_rng(seed).permutation(count)
    bounds = [0]
    cumulative = 0.0
    for ratio in split.values():
        cumulative += ratio
        bounds.append(min(count, round(cumulative * count)))
    bounds[-1] = count
    return {name: sorted(order[a:b].tolist()) for name, a, b in zip(split, bounds, bounds[1:])}


def shard_count(count: int, options: WriteOptions) -> int:
    if options.shards is not None:
        return options.shards
    per_shard = options.max_records_per_shard or 1024
    return max(1, math.ceil(count / per_shard))


@contextlib.contextmanager
def _encoded(
    encode: Callable[[Any], bytes], tasks: Sequence[Any], jobs: int
) -> Iterator[Iterator[bytes | ConversionError]]:
    """Each task's record, or its error, in task order; with ``jobs > 1`` from worker processes
    that live as long as the ``with`` block (leaving it early, at the first bad record with
    ``on_error="raise"`` or on an interrupt, cancels the rest and waits for the workers)."""
    if jobs <= 1 or len(tasks) < 2:
        yield (_attempt(encode, task) for task in tasks)
        return
    with worker_processes(jobs) as pool:
        chunk = max(1, min(64, len(tasks) // (jobs * 8)))
        yield pool.map(_attempt, [encode] * len(tasks), tasks, chunksize=chunk)


def _attempt(encode: Callable[[Any], bytes], task: Any) -> bytes | ConversionError:
    try:
        return encode(task)
    except ConversionError as error:
        return error


Observe = Callable[[int, Any], None]


def _suffix(options: WriteOptions) -> str:
    return ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zz"}[options.compression]


def _outcome(result: Any, position: int, observe: Observe | None, options: WriteOptions) -> bytes | None:
    """The record to write of one encoded task, or None for a skipped one; reports a note
    (``encode`` returns ``(record, note)`` when there is an ``observe``) to ``observe``."""
    if isinstance(result, ConversionError):
        if options.on_error == "raise":
            raise result
        logger.warning("skipping: %s", result)
        return None
    if observe is None:
        return result  # type: ignore[no-any-return]
    record, note = result
    observe(position, note)
    return record  # type: ignore[no-any-return]


def write_records(
    tasks: Sequence[Any],
    encode: Callable[[Any], Any],
    options: WriteOptions,
    *,
    observe: Observe | None = None,
) -> ConversionResult:
    """Encodes every task and writes the records as split, sharded, indexed TFRecord files.

    With ``observe``, ``encode`` returns ``(record, note)`` and ``observe(task_index, note)``
    is called for each record written (in order, in this process), and may raise a
    :class:`ConversionError` to stop the conversion.

    Raises:
        ConversionError: with ``on_error="raise"``, the first task that failed; nothing is
            left under a final name.
    """
    splits = split_tasks(len(tasks), options.split, options.seed)
    if not is_url(options.out_dir):
        os.makedirs(options.out_dir, exist_ok=True)
    order = [i for indices in splits.values() for i in indices]
    plan: list[tuple[str, int]] = []  # (split, shard) of each task of `order`: contiguous runs
    names: dict[str, list[str]] = {}
    for split, indices in splits.items():
        shards = shard_count(len(indices), options)
        plan.extend((split, i * shards // len(indices)) for i in range(len(indices)))
        stem = f"{options.name}-{split}" if split else options.name
        names[split] = [
            join(options.out_dir, f"{stem}-{k:05d}-of-{shards:05d}{_suffix(options)}") for k in range(shards)
        ]
    writers: dict[tuple[str, int], RecordWriter] = {}
    records = {split: 0 for split in splits}
    skipped: list[str] = []
    bar = progress_bar(len(order), "record", options.progress)
    try:
        current: RecordWriter | None = None
        with _encoded(encode, [tasks[i] for i in order], options.jobs) as results:
            for position, key, result in zip(order, plan, results, strict=True):
                split, shard = key
                if key not in writers:
                    if current is not None:
                        current._finish()
                    current = writers[key] = _writer(names[split][shard], options)
                if bar is not None:
                    bar.update(1)
                record = _outcome(result, position, observe, options)
                if record is None:
                    skipped.append(str(result))
                    continue
                writers[key].write(record)
                records[split] += 1
        if current is not None:
            current._finish()
        # Shards that got no task (more shards than records) are written empty, so every
        # name of "-of-N" exists.
        for split, paths in names.items():
            for shard, path in enumerate(paths):
                if (split, shard) not in writers:
                    writers[(split, shard)] = _writer(path, options)
                    writers[(split, shard)]._finish()
        for (split, shard), writer in writers.items():
            writer._publish(names[split][shard])
        for split, paths in names.items():  # each split's manifest, beside its shards
            sizes = [writers[(split, shard)].framed_sizes for shard in range(len(paths))]
            stem = f"{options.name}-{split}" if split else options.name
            prefix = join(options.out_dir, stem)
            write_shards_manifest(
                prefix, paths, sizes, options.storage_options, compression=options.compression
            )
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return ConversionResult(names, records, skipped)


def _writer(path: str, options: WriteOptions) -> RecordWriter:
    return RecordWriter(path, compression=options.compression, storage_options=options.storage_options)


def _windows(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    window: list[Any] = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def write_stream(
    items: Iterable[Any],
    encode: Callable[[Any], Any],
    options: WriteOptions,
    *,
    observe: Observe | None = None,
) -> ConversionResult:
    """:func:`write_records` for a source of unknown length, read once, in bounded memory:
    shards of ``max_records_per_shard`` records (no ``split``, no ``shards``); with
    ``jobs > 1`` items are encoded in worker processes, a window of them at a time.
    """
    if options.split is not None or options.shards is not None:
        raise ValueError("a source without a length takes no split= or shards=: give max_records_per_shard")
    writer = ShardedRecordWriter(
        join(options.out_dir, options.name),
        max_records=options.max_records_per_shard or 1024,
        suffix=_suffix(options),
        compression=options.compression,
        storage_options=options.storage_options,
    )
    skipped: list[str] = []
    bar = progress_bar(0, "record", options.progress)
    position = 0
    try:
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(worker_processes(options.jobs)) if options.jobs > 1 else None
            for window in _windows(items, 64 * options.jobs):
                if pool is None:
                    results: Iterable[Any] = (_attempt(encode, item) for item in window)
                else:
                    results = pool.map(_attempt, [encode] * len(window), window, chunksize=16)
                for result in results:
                    record = _outcome(result, position, observe, options)
                    position += 1
                    if bar is not None:
                        bar.update(1)
                    if record is None:
                        skipped.append(str(result))
                        continue
                    writer.write(record)
        total = writer.records_written
        paths = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return ConversionResult({"": paths}, {"": total}, skipped)
