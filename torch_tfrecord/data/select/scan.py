"""One pass over every record of some shards, keeping those a test passes: a selection's first pass.

Each shard is read as a stream, start to end, its records handed to the test in batches (the
test decodes what it needs of them: :class:`~torch_tfrecord.data.select.conditions.ConditionTest` only
the features its clauses name, :class:`~torch_tfrecord.data.select.conditions.PredicateTest` a spec's;
the viewer's test describes each record as its page does); no index is needed, and none is
built first. Nothing here needs torch (the viewer saves selections without it). Shards are
scanned one after another, or in ``jobs`` spawned processes (a shard each). The result is a
:class:`~torch_tfrecord.data.select.selection.Selection` with the shards' fingerprints, as a dataset of
the same shards computes them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import as_completed
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ...errors import ExampleDecodeError, FeatureError, SelectionError
from ...records.io import Compression, PathLike, StorageOptions, resolve_compression
from ...records.reader import read_records
from ...records.shard_access import shard_specs
from ...records.shards.files import RecordFiles
from ...records.shards.index import IndexArg
from ...records.shards.resolve import list_shards, resolve_shards
from ...support.processes import worker_processes
from ...support.text import plural
from .id_sets import IdSetParts
from .selection import Selection, ShardPrint, shard_prints

__all__ = ["SURVEY_RECORDS", "RecordTest", "ScanShard", "first_records", "scan_selection", "scan_shards"]

logger = logging.getLogger(__name__)

Mask = npt.NDArray[np.bool_]
ScanProgress = Callable[[int, bool], None]
"""Told ``(records scanned since the last call, whether a shard was finished)``."""
_BATCH_RECORDS = 4096
_BATCH_BYTES = 16 << 20
SURVEY_RECORDS = 1000
"""Records read to learn the features' types, as the viewer's schema reads."""


class RecordTest(Protocol):
    """Which of a batch of serialized records pass (``locations``: each one's place, for errors)."""

    def __call__(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> Mask: ...


@dataclasses.dataclass(frozen=True)
class ScanShard:
    """A shard to scan: its records (a byte range of its stream, or all), and what is known of it.

    ``shard.records`` and (for a compressed shard) ``shard.size`` are -1 until the scan counts them.
    """

    path: str
    compression: Compression
    byte_range: tuple[int, int] | None
    shard: ShardPrint


def scan_shards(
    sources: PathLike | Sequence[PathLike] | RecordFiles, index: IndexArg, storage_options: StorageOptions
) -> list[ScanShard]:
    """The shards of ``sources`` as a dataset of them sees them (sorted; with their fingerprints).

    With a manifest, given indexes or a :class:`RecordFiles`, the counts are known; otherwise the
    shards are listed (one listing; a look-up per remote shard only where it says no size) and
    counted by the scan itself: no index is read or built.
    """
    if isinstance(sources, RecordFiles):
        return _from_files(sources)
    listed = list_shards(sources, index, storage_options)  # (once: the resolving below reuses it)
    if index is not None or listed.manifest is not None:
        shards = resolve_shards(
            sources, index=index, storage_options=storage_options, cache_dir=False, listed=listed
        )
        return _from_files(RecordFiles(shards))
    listing = listed.listing
    assert listing is not None
    paths = listing.paths
    compressions = [resolve_compression("auto", path, storage_options) for path in paths]
    specs = shard_specs(paths, [None] * len(paths), storage_options, None, listing)
    return [
        ScanShard(
            path,
            compression,
            None,
            ShardPrint(os.path.basename(path), -1 if compression else spec.size, -1, spec.version),
        )
        for path, compression, spec in zip(paths, compressions, specs, strict=True)
    ]


def _from_files(files: RecordFiles) -> list[ScanShard]:
    shards = []
    for number, shard in enumerate(shard_prints(files)):
        spec = files.specs[number]
        table = files.tables.arrays[number]
        whole = spec.inflating or not len(table) or shard.records == 0
        byte_range = None if whole else (int(table[0, 0]), int(table[-1, 0] + table[-1, 1]))
        compression = spec.compressed.compression if spec.compressed is not None else None
        shards.append(ScanShard(spec.path, compression, byte_range, shard))  # type: ignore[arg-type]
    return shards


def first_records(shards: Sequence[ScanShard], count: int, storage_options: StorageOptions) -> list[bytes]:
    """The first ``count`` records of ``shards`` (fewer if they hold fewer)."""
    sample: list[bytes] = []
    for shard in shards:
        sample += itertools.islice(_records(shard, storage_options, False), count - len(sample))
        if len(sample) >= count:
            break
    return sample


def _records(shard: ScanShard, storage_options: StorageOptions, verify_crc: bool) -> Iterator[bytes]:
    return read_records(
        shard.path,
        compression=shard.compression,
        verify_crc=verify_crc,
        byte_range=shard.byte_range,
        storage_options=storage_options,
    )


@dataclasses.dataclass
class _Scanned:
    """One shard's result: its kept records' bits, how many records and bytes it holds."""

    bits: bytes
    records: int
    size: int


def _scan_one(
    shard: ScanShard,
    test: RecordTest,
    verify_crc: bool,
    storage_options: StorageOptions,
    progress: ScanProgress | None = None,
) -> _Scanned:
    masks: list[Mask] = []
    count = size = 0
    records = _records(shard, storage_options, verify_crc)
    take = 64  # records per batch: grown to about _BATCH_BYTES of them (and at most _BATCH_RECORDS)
    while True:
        batch = list(itertools.islice(records, take))
        if not batch:
            break
        held = sum(map(len, batch))
        masks.append(_test(test, batch, shard, count))
        count += len(batch)
        size += held + 16 * len(batch)
        take = max(1, min(_BATCH_RECORDS, _BATCH_BYTES * len(batch) // max(held, 1)))
        if progress is not None:
            progress(len(batch), False)
    expected = shard.shard.records
    if expected >= 0 and count != expected:
        raise SelectionError(f"{shard.path!r} holds {count:,} records where its index says {expected:,}")
    mask = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
    return _Scanned(np.packbits(mask, bitorder="little").tobytes(), count, size)


def _test(test: RecordTest, batch: list[bytes], shard: ScanShard, first: int) -> Mask:
    try:
        mask = test(batch)
    except (FeatureError, ExampleDecodeError):  # again, each record named
        number = first if shard.byte_range is None else None
        where = "" if number is not None else " (numbered from the shard's part)"
        locations = [f"record {first + i} of {shard.path!r}{where}" for i in range(len(batch))]
        mask = test(batch, locations)
    result = np.asarray(mask, dtype=bool)
    if result.shape != (len(batch),):
        raise ValueError(f"a test gave {result.shape} results for {len(batch)} records")
    return result


def scan_selection(
    shards: Sequence[ScanShard],
    test: RecordTest,
    *,
    jobs: int | None = 1,
    verify_crc: bool = True,
    storage_options: StorageOptions = None,
    progress: ScanProgress | None = None,
    where: str = "",
) -> Selection:
    """Every record of ``shards`` through ``test``, in one pass: the records it passes.

    Args:
        shards: from :func:`scan_shards`.
        test: which records of a batch pass.
        jobs: processes that scan shards at once (None: the CPUs; 1: here, none started). The
            test is pickled to them (a predicate must then be a module-level function).
        verify_crc: check every record's CRCs.
        progress: told of the records scanned and the shards finished.
        where: how the selection is made, kept in it.

    Raises:
        SelectionError: no record passes (nothing is written then), or a shard holds other
            records than its index says.
    """
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"{jobs=} must be >= 1")
    if jobs == 1 or len(shards) < 2:
        results = []
        for shard in shards:
            results.append(_scan_one(shard, test, verify_crc, storage_options, progress))
            if progress is not None:
                progress(0, True)
    else:
        results = _in_processes(shards, test, min(jobs, len(shards)), verify_crc, storage_options, progress)
    prints = [
        dataclasses.replace(
            shard.shard, records=found.records, size=shard.shard.size if shard.shard.size >= 0 else found.size
        )
        for shard, found in zip(shards, results, strict=True)
    ]
    parts = IdSetParts(sum(found.records for found in results))
    for found in results:
        parts.add_bits(found.records, np.frombuffer(found.bits, dtype=np.uint8))
    selection = Selection(prints, parts.build(), where)
    if not len(selection):
        what = f"`{where}`" if where else "the test"
        raise SelectionError(
            f"no record passes {what} (of {plural(selection.num_records, 'record')} in "
            f"{plural(len(prints), 'shard')}): the selection would be empty"
        )
    return selection


def _in_processes(
    shards: Sequence[ScanShard],
    test: RecordTest,
    jobs: int,
    verify_crc: bool,
    storage_options: StorageOptions,
    progress: ScanProgress | None,
) -> list[_Scanned]:
    try:
        pickle.dumps(test)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise ValueError(
            f"jobs={jobs} runs the test in other processes, which cannot take it ({error}): give a "
            "module-level function as the predicate, or jobs=1"
        ) from None
    results: list[_Scanned | None] = [None] * len(shards)
    with worker_processes(jobs) as pool:
        futures = {
            pool.submit(_scan_one, shard, test, verify_crc, storage_options): number
            for number, shard in enumerate(shards)
        }
        for future in as_completed(futures):
            found = future.result()
            results[futures[future]] = found
            if progress is not None:
                progress(found.records, True)
    return [found for found in results if found is not None]
