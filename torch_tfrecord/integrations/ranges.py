"""Record ranges of TFRecord shards, for engines that split a read across their own tasks (Spark, Beam).

A read is planned on the driver from the dataset's manifest (its record counts, and its zipped index
tables where it has them) or from the shards' indexes, never by a scan: the indexed records are cut
into ranges of about equal bytes, so a 10 GB shard is read by many tasks. A range is small to send
(a path and two record numbers); the task that reads it loads its shard's index itself. A file with
no index, or a compressed one, is one range, read front to back.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..codec.decode import decode_batch
from ..codec.native import packed_bytes
from ..codec.payloads import Payload
from ..codec.spec import FeatureSpec
from ..data.decoding import BatchDecoder
from ..errors import ExampleDecodeError, FeatureError, IndexFormatError, TFRecordError
from ..records.index import default_index_path, load_index
from ..records.io import PathLike, StorageOptions, exists, is_url, local_path, resolve_compression
from ..records.listing import SourceListing, list_sources
from ..records.manifest import MANIFEST_SUFFIX, Manifest, read_manifest, read_tables
from ..records.reader import OnError, read_records
from ..records.shards.files import RecordFiles
from ..records.shards.manifest_shards import find_manifest

__all__ = [
    "DecodeOptions",
    "ReadPlan",
    "RecordRange",
    "decodable_records",
    "plan_read",
    "plan_runs",
    "read_range",
    "read_range_packed",
]

logger = logging.getLogger(__name__)

_BATCH_BYTES = 8 << 20  # framed bytes decoded in one call
_BATCH_RECORDS = 8192


def plan_runs(framed_sizes: npt.ArrayLike, parallelism: int) -> list[tuple[int, int]]:
    """Cuts consecutive records into at most ``parallelism`` runs of about equal bytes.

    Args:
        framed_sizes: the framed size of each record, in order (all files concatenated).
        parallelism: the number of runs wanted.

    Returns:
        ``(start, stop)`` record ranges that cover every record once, in order, none empty.
    """
    sizes = np.asarray(framed_sizes, dtype=np.int64).reshape(-1)
    if parallelism < 1:
        raise ValueError(f"{parallelism=} must be positive")
    n = len(sizes)
    if n == 0:
        return []
    ends = np.cumsum(sizes)
    runs = min(parallelism, n)
    # Cut after the record whose end first reaches each k/runs of the bytes.
    targets = ends[-1] * np.arange(1, runs) / runs
    cuts = np.searchsorted(ends, targets, side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n), [n]]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds.tolist())]


@dataclasses.dataclass(frozen=True)
class RecordRange:
    """Records ``[start, stop)`` of one file; ``stop`` None: the whole file, read front to back.

    Attributes:
        path: the file.
        start, stop: record numbers in it.
        manifest: the manifest whose zipped tables hold its index ("": its ``.idx`` file).
        shard: its place in that manifest.
    """

    path: str
    start: int = 0
    stop: int | None = None
    manifest: str = ""
    shard: int = 0


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """What a read found on the driver: the files, their record counts (None: not known without a
    scan), their index tables where loaded, and the manifest's saved spec."""

    paths: list[str]
    counts: list[int | None]
    tables: list[npt.NDArray[np.int64] | None]
    indexed: list[bool]
    manifest: Manifest | None

    @property
    def saved_spec(self) -> dict[str, Any] | None:
        """The spec the manifest keeps (as ``spec.json`` holds it), or None."""
        return None if self.manifest is None else self.manifest.spec

    def ranges(self, max_bytes: int) -> list[list[RecordRange]]:
        """The files' records in groups of about ``max_bytes`` framed bytes (one group per task).

        An indexed file is cut at record boundaries (a large shard into several groups, small
        consecutive ones together); a file without an index (or compressed) is a group alone.
        """
        if max_bytes < 1:
            raise ValueError(f"{max_bytes=} must be positive")
        groups: list[list[RecordRange]] = []
        indexed = [i for i, ok in enumerate(self.indexed) if ok]
        location = self.manifest.location if self.manifest is not None else ""
        zipped = self.manifest is not None and self.manifest.tables
        sized = [i for i in indexed if self.tables[i] is not None]
        counted = [i for i in indexed if self.tables[i] is None]
        if sized:
            tables = [self.tables[i] for i in sized]
            framed = np.concatenate([table[:, 1] for table in tables])  # type: ignore[index]
            starts = np.concatenate([[0], np.cumsum([len(table) for table in tables])])  # type: ignore[arg-type]
            wanted = max(1, math.ceil(int(framed.sum()) / max_bytes))
            for start, stop in plan_runs(framed, wanted):
                group = []
                for k in range(len(sized)):
                    a, b = max(start, int(starts[k])), min(stop, int(starts[k + 1]))
                    if a < b:
                        i = sized[k]
                        table_from = location if zipped else ""
                        group.append(
                            RecordRange(self.paths[i], a - int(starts[k]), b - int(starts[k]), table_from, i)
                        )
                groups.append(group)
        for i in counted:  # a manifest without zipped tables: records by count, the index read by the task
            count = self.counts[i] or 0
            size = self.tables_size(i)
            pieces = max(1, min(count, math.ceil(size / max_bytes)))
            bounds = np.linspace(0, count, pieces + 1).astype(np.int64)
            groups.extend(
                [[RecordRange(self.paths[i], int(a), int(b))] for a, b in itertools.pairwise(bounds)]
            )
        groups.extend([[RecordRange(self.paths[i])] for i, ok in enumerate(self.indexed) if not ok])
        return [group for group in groups if group]

    def tables_size(self, i: int) -> int:
        if self.manifest is not None:
            return self.manifest.shards[i].size
        return 0


def plan_read(sources: PathLike | Sequence[PathLike], storage_options: StorageOptions = None) -> ReadPlan:
    """Finds the files ``sources`` name and what is known of their records, without a scan: from
    the manifest named or found beside them, else from each file's ``.idx`` (checked).

    Raises:
        SourceNotFoundError: nothing matches; StaleIndexError: an index or manifest that does not
            describe its files; IndexFormatError: a damaged one.
    """
    options = dict(storage_options or {})
    items = [sources] if isinstance(sources, str) or not isinstance(sources, Sequence) else list(sources)
    named = [str(item) for item in items]
    listing = None if any(name.endswith(".manifest.json") for name in named) else list_sources(named, options)
    manifest = find_manifest(named, listing, options) or _manifest_of_folder(named, listing, options)
    if manifest is not None:
        paths = list(manifest.paths)
        loaded = read_tables(manifest, options)
        tables: list[npt.NDArray[np.int64] | None] = (
            list(loaded) if loaded is not None else [None] * len(paths)
        )
        indexed = [
            not shard.compression and (loaded is not None or bool(shard.index)) for shard in manifest.shards
        ]
        counts: list[int | None] = [shard.records for shard in manifest.shards]
        return ReadPlan(paths, counts, tables, indexed, manifest)
    assert listing is not None  # (no manifest was named)
    paths = listing.paths
    tables = []
    for path in paths:
        index_path = default_index_path(path)
        compressed = resolve_compression("auto", path, options) is not None
        if compressed or not exists(index_path, options):
            tables.append(None)
            continue
        tables.append(load_index(index_path, data_path=path, storage_options=options))
    for path, table in zip(paths, tables, strict=True):
        if table is None:
            logger.info("%r has no index: one task reads it whole (`tfrecord-index build` splits it)", path)
    return ReadPlan(
        paths,
        [None if table is None else len(table) for table in tables],
        tables,
        [table is not None for table in tables],
        None,
    )


def _manifest_of_folder(
    named: list[str], listing: SourceListing | None, storage_options: StorageOptions
) -> Manifest | None:
    """The manifest in the one local folder named that lists exactly the shards found below it: a
    partitioned write's, whose shards are in ``key=value/`` folders beneath it (the datasets look
    for a manifest beside the shards only)."""
    if listing is None or len(named) != 1 or is_url(named[0]) or not os.path.isdir(local_path(named[0])):
        return None
    folder = local_path(named[0])
    for candidate in sorted(glob.glob(os.path.join(glob.escape(folder), "*" + MANIFEST_SUFFIX))):
        try:
            manifest = read_manifest(candidate, storage_options)
        except (OSError, IndexFormatError) as error:
            logger.info("%r is not used: %s", candidate, error)
            continue
        if sorted(manifest.paths) == listing.paths:
            logger.info("read the shards' sizes and counts from %r", candidate)
            return manifest
    return None


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """How a task decodes its records (sent to every task with its ranges)."""

    spec: dict[str, FeatureSpec] | None
    payload: Payload | None = None  # raw records or SequenceExamples (None: Examples by ``spec``)
    dtypes: dict[str, Any] | None = None  # spec=None: every key's type, so batches agree
    verify_crc: bool = True
    on_error: OnError = "raise"
    storage_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error={self.on_error!r} must be 'raise' or 'skip'")

    def decode(self, records: list[bytes], locations: list[str] | None = None) -> dict[str, Any]:
        if self.payload is not None:
            return self.payload.decode(records, locations)
        return decode_batch(records, self.spec, locations=locations, dtypes=self.dtypes)


_tables_lock = threading.Lock()
_manifest_tables: OrderedDict[str, list[npt.NDArray[np.int64]]] = OrderedDict()


def _table(rng: RecordRange, options: DecodeOptions) -> npt.NDArray[np.int64]:
    """The index table of the range's file: from the manifest's zipped tables (kept for the
    process's next ranges) or its ``.idx`` (checked against the file)."""
    storage = options.storage_options
    if not rng.manifest:
        return load_index(default_index_path(rng.path), data_path=rng.path, storage_options=storage)
    with _tables_lock:
        tables = _manifest_tables.get(rng.manifest)
        if tables is None:
            loaded = read_tables(read_manifest(rng.manifest, storage), storage)
            if loaded is None:
                raise TFRecordError(f"manifest {rng.manifest!r} has no index tables (written again since?)")
            tables = _manifest_tables[rng.manifest] = loaded
            while len(_manifest_tables) > 4:
                _manifest_tables.popitem(last=False)
    return tables[rng.shard]


@dataclasses.dataclass
class Decoded:
    """One decoded batch of a range: its columns, its row count, the rows to keep (None: all), the
    damaged records left out, and the record number (in ``path``) of its first row."""

    columns: dict[str, Any]
    num_rows: int
    keep: npt.NDArray[np.bool_] | None
    skipped: int
    path: str
    first: int

    def locate(self, row: int) -> str:
        """Names the row's record."""
        return f"record {self.first + row} of {self.path!r}"


def read_range_packed(rng: RecordRange, options: DecodeOptions) -> Iterator[Decoded]:
    """:func:`read_range` with each batch's bytes and str columns packed (a
    :class:`~torch_tfrecord.codec.byte_column.ByteColumn` each: one buffer and offsets, which
    become an Arrow array's own), not a Python object per value: for readers that make Arrow."""
    batches = read_range(rng, options)
    while True:
        with packed_bytes():  # (around each step only: not while the caller holds a batch)
            decoded = next(batches, None)
        if decoded is None:
            return
        yield decoded


def read_range(rng: RecordRange, options: DecodeOptions) -> Iterator[Decoded]:
    """Reads and decodes the records of ``rng`` in batches (at most a few MB each).

    Raises:
        CorruptRecordError and other TFRecordErrors naming the file, byte offset and record,
        unless ``options.on_error == "skip"`` (then damaged records are logged and counted
        in ``Decoded.skipped``).
    """
    if rng.stop is None:
        yield from _read_whole(rng.path, options)
        return
    table = _table(rng, options)
    files = RecordFiles.of_tables([rng.path], [table], options.storage_options)
    decoder = BatchDecoder(
        files, options.spec, verify_crc=options.verify_crc, on_error=options.on_error, payload=options.payload
    )
    try:
        ends = np.cumsum(table[rng.start : rng.stop, 1])
        first = 0
        while first < len(ends):
            base = ends[first - 1] if first else 0
            stop_at = int(np.searchsorted(ends, base + _BATCH_BYTES, side="right"))
            stop_at = min(max(stop_at, first + 1), first + _BATCH_RECORDS, len(ends))
            ids = np.arange(rng.start + first, rng.start + stop_at, dtype=np.int64)
            first = stop_at
            try:
                columns, _, marked = decoder.decode(ids, np.zeros(len(ids), dtype=bool))
            except TFRecordError as error:
                # With "skip", a plain TFRecordError says every record of the batch is damaged.
                if options.on_error == "skip" and type(error) is TFRecordError:
                    yield Decoded({}, 0, None, len(ids), rng.path, int(ids[0]))
                    continue
                raise
            skipped = int(marked.sum())
            yield Decoded(columns, len(ids), ~marked if skipped else None, skipped, rng.path, int(ids[0]))
    finally:
        files.close()


def _read_whole(path: str, options: DecodeOptions) -> Iterator[Decoded]:
    """A file without an index (or compressed), front to back."""
    records = read_records(
        path,
        verify_crc=options.verify_crc,
        on_error=options.on_error,
        storage_options=options.storage_options,
    )
    number = 0
    while True:
        batch = list(itertools.islice(records, _BATCH_RECORDS))
        if not batch:
            return
        try:
            decoded = Decoded(options.decode(batch), len(batch), None, 0, path, number)
        except (FeatureError, ExampleDecodeError):
            decoded = _decode_one_by_one(path, batch, number, options)
        number += len(batch)
        yield decoded


def _decode_one_by_one(path: str, batch: list[bytes], first: int, options: DecodeOptions) -> Decoded:
    """A batch that failed to decode, again record by record (:func:`decodable_records`)."""
    good = decodable_records(batch, first, path, options.decode, options.on_error)
    return Decoded(options.decode(good), len(good), None, len(batch) - len(good), path, first)


def decodable_records(
    records: list[bytes],
    first: int,
    path: str,
    decode: Callable[[list[bytes], list[str]], Any],
    on_error: OnError,
) -> list[bytes]:
    """The records of a batch that failed to decode, tried one by one: raises naming the first bad
    record (``record N of 'path'``), or with ``on_error="skip"`` returns the good ones, each bad one
    logged. Shared by Spark's, Beam's and Ray's reads."""
    good = []
    for i, record in enumerate(records):
        try:
            decode([record], [f"record {first + i} of {path!r}"])
        except (FeatureError, ExampleDecodeError) as error:
            if on_error == "raise":
                raise
            logger.warning("skipping record: %s", error)
            continue
        good.append(record)
    return good
