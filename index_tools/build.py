"""Building index files for many TFRecord shards in parallel processes, atomically."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from typing import Literal

from torch_tfrecord.errors import IndexFormatError, StaleIndexError, TFRecordError
from torch_tfrecord.records import remote
from torch_tfrecord.records.compressed.index import (
    CompressedIndex,
    default_compressed_index_path,
    save_compressed_index,
)
from torch_tfrecord.records.compressed.inflate import build_compressed_index
from torch_tfrecord.records.index import build_index, check_table, default_index_path, save_index
from torch_tfrecord.records.io import (
    PathLike,
    StorageOptions,
    exists,
    file_size,
    is_url,
    join,
    resolve_compression,
)
from torch_tfrecord.records.reader import OnError, ReadStats
from torch_tfrecord.records.shards.index import load_shard_index
from torch_tfrecord.support.processes import worker_processes
from torch_tfrecord.support.text import plural

__all__ = ["BuildResult", "IndexCheck", "build_indexes", "index_path_for", "index_status"]

_log = logging.getLogger(__name__)

Status = Literal["built", "fresh", "failed"]
IndexState = Literal["fresh", "missing", "stale", "unreadable"]


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What happened to one data file.

    Attributes:
        path: the data file.
        index_path: its index file.
        status: ``"built"``, ``"fresh"`` (an up-to-date index was kept) or ``"failed"``.
        records: records in the file (0 when failed).
        bytes: size of the data file.
        seconds: time spent on this file.
        error: the error message, for a failed file.
        damaged: with ``on_error="skip"``, the damaged regions left out of the index (each a
            :class:`torch_tfrecord.DamagedRegion`'s text: its byte offsets and records lost).
    """

    path: str
    index_path: str
    status: Status
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    damaged: tuple[str, ...] = ()


def index_path_for(
    path: PathLike, out_dir: PathLike | None = None, storage_options: StorageOptions = None
) -> str:
    """Where the index of ``path`` goes: beside it, or in ``out_dir`` under the same base name
    (either may be a URL). A GZIP / ZLIB file's compressed index is ``<name>.cidx``, a plain
    file's offset index ``<name>.idx``."""
    compressed = resolve_compression("auto", path, storage_options) is not None
    name = default_compressed_index_path(path) if compressed else default_index_path(path)
    if out_dir is None:
        return name
    return join(os.fspath(out_dir), os.path.basename(name))


@dataclasses.dataclass(frozen=True)
class IndexCheck:
    """Whether an index file is a fresh index of its data file.

    Attributes:
        state: ``"fresh"``, ``"missing"``, ``"stale"`` or ``"unreadable"``.
        detail: why, in words.
        records: records the index lists (0 unless fresh).
        gaps: ``(start, end)`` byte ranges a fresh index leaves out (damaged regions; only when
            they were allowed).
        damaged: a fresh compressed index of a damaged file (only when allowed): the error that
            ended its records, the rest of the file being left out.
    """

    state: IndexState
    detail: str
    records: int = 0
    gaps: tuple[tuple[int, int], ...] = ()
    damaged: str = ""


def index_status(
    path: PathLike,
    index_path: PathLike,
    storage_options: StorageOptions = None,
    *,
    allow_damaged_gaps: bool = False,
) -> IndexCheck:
    """Checks ``index_path`` (an offset or a compressed index) against the data file ``path``
    (``allow_damaged_gaps``: an index built with ``on_error="skip"`` is fresh too; see
    :func:`torch_tfrecord.records.index.check_index`)."""
    if not exists(index_path, storage_options):
        return IndexCheck("missing", f"no index at {os.fspath(index_path)!r}")
    try:
        found = load_shard_index(
            os.fspath(index_path), os.fspath(path), storage_options, allow_damaged_gaps=allow_damaged_gaps
        )
    except StaleIndexError as error:
        return IndexCheck("stale", str(error))
    except (IndexFormatError, OSError) as error:
        return IndexCheck("unreadable", str(error))
    if isinstance(found, CompressedIndex):
        records = len(found.table)
        points = "positions and seek points" if found.seek_points else "positions, no seek points"
        detail = f"{records} records ({found.compression.upper()}: {points})"
        if found.damaged:
            detail += ", the damaged rest of the file left out"
        return IndexCheck("fresh", detail, records, damaged=found.damaged)
    gaps: tuple[tuple[int, int], ...] = ()
    if allow_damaged_gaps:
        starts, ends = check_table(found, file_size(path, storage_options), "", allow_damaged_gaps=True)
        gaps = tuple(zip(starts.tolist(), ends.tolist()))
    detail = f"{len(found)} records" + (f", {plural(len(gaps), 'damaged region')} left out" if gaps else "")
    return IndexCheck("fresh", detail, len(found), gaps)


def _fresh(
    path: str, index_path: str, on_error: OnError, storage_options: StorageOptions
) -> BuildResult | None:
    """The result for a file whose index is fresh already (with ``on_error="skip"``, also one
    that leaves damaged regions out, listed again); None when it needs building."""
    start = time.perf_counter()
    try:
        check = index_status(path, index_path, storage_options, allow_damaged_gaps=on_error == "skip")
        if check.state != "fresh":
            return None
        size = file_size(path, storage_options)
    except (TFRecordError, OSError):
        return None  # building it reports the error
    damaged = tuple(
        f"bytes {start}..{end} of {path!r} (left out when the index was built)" for start, end in check.gaps
    )
    if check.damaged:
        damaged += (_rest_left_out(path, check.records, check.damaged, " when the index was built"),)
    seconds = time.perf_counter() - start
    return BuildResult(path, index_path, "fresh", check.records, size, seconds, damaged=damaged)


def _rest_left_out(path: str, records: int, error: str, when: str = "") -> str:
    """A compressed file's damaged rest, as a damaged region's line."""
    first = plural(records, "record")
    return f"{path!r} after its first {first}: the rest is damaged and left out{when} ({error})"


def _build_one(
    path: str, index_path: str, verify_crc: bool, on_error: OnError, storage_options: StorageOptions
) -> BuildResult:
    start = time.perf_counter()
    stats = ReadStats()
    try:
        size = file_size(path, storage_options)
        if resolve_compression("auto", path, storage_options) is not None:
            compressed = build_compressed_index(
                path, verify_crc=verify_crc, on_error=on_error, stats=stats, storage_options=storage_options
            )
            save_compressed_index(compressed, index_path, storage_options)
            records = len(compressed.table)
            if compressed.damaged:
                return BuildResult(
                    path,
                    index_path,
                    "built",
                    records,
                    size,
                    time.perf_counter() - start,
                    damaged=(_rest_left_out(path, records, compressed.damaged),),
                )
        else:
            table = build_index(
                path, verify_crc=verify_crc, on_error=on_error, stats=stats, storage_options=storage_options
            )
            save_index(table, index_path, storage_options)
            records = len(table)
    except (TFRecordError, OSError) as error:
        return BuildResult(path, index_path, "failed", 0, 0, time.perf_counter() - start, str(error))
    damaged = tuple(str(region) for region in stats.damaged)
    seconds = time.perf_counter() - start
    return BuildResult(path, index_path, "built", records, size, seconds, damaged=damaged)


def build_indexes(
    paths: Sequence[PathLike],
    *,
    jobs: int | None = None,
    force: bool = False,
    verify_crc: bool = False,
    on_error: OnError = "raise",
    out_dir: PathLike | None = None,
    on_result: Callable[[BuildResult], None] | None = None,
    storage_options: StorageOptions = None,
) -> list[BuildResult]:
    """Builds the index of every file, in parallel processes.

    A file that fails is reported in its result; the others still finish.

    Args:
        paths: TFRecord files (paths or URLs); GZIP / ZLIB ones get a compressed index
            (``<name>.cidx``: record positions and seek points), the others an offset index.
        jobs: worker processes (default: the number of CPUs; 1 runs in this process). They are
            spawned, not forked: a script calls this under ``if __name__ == "__main__":``.
            Fresh indexes are recognised first, in this process: no worker starts when no file
            needs an index, and none when only one does.
        force: rebuild indexes that are already fresh.
        verify_crc: also check every payload CRC while building.
        on_error: ``"raise"`` (a damaged file fails), or ``"skip"``: index the intact records of
            a damaged file and list the regions left out in its result's ``damaged``.
        out_dir: write indexes there instead of beside the data (a directory or URL prefix).
        on_result: called with each result as it completes (e.g. to advance a progress bar).
        storage_options: for the fsspec file system of URLs.

    Returns:
        One result per path, in the order of ``paths``.

    Raises:
        ValueError: two files would get the same index path in ``out_dir``.
    """
    names = [os.fspath(p) for p in paths]
    index_paths = [index_path_for(p, out_dir, storage_options) for p in names]
    seen: dict[str, str] = {}
    for name, index_path in zip(names, index_paths):
        if index_path in seen and seen[index_path] != name:
            raise ValueError(f"{seen[index_path]!r} and {name!r} would both write {index_path!r}")
        seen[index_path] = name
    if out_dir is not None:
        if is_url(os.fspath(out_dir)):
            remote.make_dirs(os.fspath(out_dir), storage_options)
        else:
            os.makedirs(out_dir, exist_ok=True)
    results: dict[int, BuildResult] = {}
    pending: list[int] = []
    for i, (name, index_path) in enumerate(zip(names, index_paths)):
        fresh = None if force else _fresh(name, index_path, on_error, storage_options)
        if fresh is None:
            pending.append(i)
            continue
        results[i] = fresh
        if on_result is not None:
            on_result(fresh)
    jobs = min(jobs or os.cpu_count() or 1, len(pending))
    _log.debug("%d of %d files need an index; %d worker processes", len(pending), len(names), jobs)
    if jobs <= 1:
        for i in pending:
            results[i] = _build_one(names[i], index_paths[i], verify_crc, on_error, storage_options)
            if on_result is not None:
                on_result(results[i])
    else:
        with worker_processes(jobs) as pool:
            futures = {
                pool.submit(_build_one, names[i], index_paths[i], verify_crc, on_error, storage_options): i
                for i in pending
            }
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if on_result is not None:
                    on_result(results[i])
    return [results[i] for i in range(len(names))]
