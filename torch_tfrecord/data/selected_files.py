"""A dataset's records when it reads a selection: the selected records of its files, numbered
0, 1, 2 ... in file order, read through the files' indexes.

:class:`SelectedFiles` is the files a dataset reads (so the epoch's plan has N = the records
selected, and every shuffle, rank, worker, resume, mix and framework works as for any files):
each shard keeps its number and holds its selected records, and a read maps the records'
places to the files' record ids (:meth:`~torch_tfrecord.data.id_sets.IdSet.select`, one
vectorised call per batch) before the files read them. :func:`selected_files` turns a dataset's
``select=`` / ``subset=`` into one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import SelectionError
from ..records.io import PathLike, StorageOptions
from ..records.reader import OnError
from ..support.extension import compiled as _native
from ..support.seeds import mix_seed
from .id_sets import IdSetParts, from_ids
from .permutation import permute
from .selection import Selection, shard_prints
from .shards import RecordFiles

__all__ = ["LISTED_BYTES", "WHOLE_SHARD", "SelectedFiles", "Subset", "selected_files"]

Subset = float | int | range | Sequence[range] | npt.ArrayLike | Selection | PathLike | None
"""What ``subset=`` takes: a fraction or a count of the records (drawn once from ``seed``), a
``range`` or list of ranges of record ids, record ids, a boolean mask of the records, a
:class:`~torch_tfrecord.data.selection.Selection` or a selection file's path."""

WHOLE_SHARD = 0.25
"""Through the cache, a remote shard of which at least this share of the records is selected is
fetched whole (once per node, then read from disk every epoch); a sparser one is read by ranges
(each epoch fetches only its selected records)."""
LISTED_BYTES = 32 << 20
"""A selection of up to this many bytes of ids (4 M records) is listed once per process, so that
a batch finds its records by one lookup (a bitmap's own select costs tens of microseconds)."""
_SUBSET_KEY = 0x5E1EC7  # the subset's draw is its own permutation, not an epoch's
_DRAW = 1 << 20  # positions drawn at once


class SelectedFiles(RecordFiles):
    """The selected records of ``files``, read by their place in the selection.

    Record ``i`` is the ``i``-th selected record (in file order); each shard keeps its number and
    holds its selected records (:attr:`counts`), so a dataset over it splits, shuffles and resumes
    the selected records as it would any files'. Reading goes to :attr:`base` (``files``, whose
    sparsely selected remote shards read by ranges rather than through the cache: see
    :data:`WHOLE_SHARD`) with the files' record ids.

    Args:
        files: the files the selection was made for (checked by the caller).
        selection: which of their records.
    """

    def __init__(self, files: RecordFiles, selection: Selection) -> None:
        # Not RecordFiles.__init__: the reading is the base files'; this is a view of their records.
        self.selection = selection
        self.base = _with_ranged_reads(files, selection.counts)
        base = self.base
        self.paths, self.storage_options, self.cache = base.paths, base.storage_options, base.cache
        self.saved_spec, self.specs, self.pool = base.saved_spec, base.specs, base.pool
        self.sizes, self.tables = base.sizes, base.tables
        self.counts = selection.counts
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._count = int(self.starts[-1])
        self._listed: npt.NDArray[np.int64] | None = None  # the ids, listed (not pickled)
        self._last: tuple[Any, npt.NDArray[np.int64]] | None = None  # the last places mapped

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_listed"] = state["_last"] = None  # each process lists them when it first reads
        return state

    def record_ids(self, places: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The files' record ids of the selected records at ``places``."""
        last = self._last
        if last is not None and last[0] is places:  # a batch's ids, asked again by its decoder
            return last[1]
        array = np.ascontiguousarray(places, dtype=np.int64)
        listed, ids = self._listed, self.selection.ids
        if listed is None and 8 * len(ids) <= LISTED_BYTES:
            listed = self._listed = ids.ids()
        if listed is not None and _native is not None:
            found = np.empty_like(array)
            if _native.take_ids(listed, array, found) >= 0:
                raise IndexError(f"record ids must lie in [0, {self._count}) (the selected records)")
        else:
            if array.size and (array.min() < 0 or array.max() >= self._count):
                raise IndexError(f"record ids must lie in [0, {self._count}) (the selected records)")
            found = ids.select(array) if listed is None else listed[array]
        if isinstance(places, np.ndarray):
            self._last = (places, found)
        return found

    @property
    def fingerprint(self) -> str:
        """Identifies the data and the selection."""
        both = f"{self.base.fingerprint}\0{self.selection.digest}".encode()
        return hashlib.sha256(both).hexdigest()[:32]

    def locate(self, record_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(shard, record number in the shard's file)`` of each selected record."""
        return self.base.locate(self.record_ids(record_ids))

    def describe(self, record_id: int) -> str:
        return self.base.describe(int(self.record_ids([record_id])[0]))

    def read(
        self, record_ids: npt.ArrayLike, *, verify_crc: bool = True, on_error: OnError = "raise"
    ) -> list[bytes | None]:
        return self.base.read(self.record_ids(record_ids), verify_crc=verify_crc, on_error=on_error)

    def read_framed(
        self, record_ids: npt.ArrayLike, scratch: bytearray | None = None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        return self.base.read_framed(self.record_ids(record_ids), scratch)

    def select(self, ranges: Sequence[tuple[int, int, int]]) -> RecordFiles:
        raise ValueError(
            "select ranges of the files, then the records (a selection of a selection is not kept)"
        )

    def hold_window(self, records: int) -> None:
        self.base.hold_window(records)

    def close(self) -> None:
        self.base.close()


def _with_ranged_reads(files: RecordFiles, counts: npt.NDArray[np.int64]) -> RecordFiles:
    """``files``, its sparsely selected cached shards read by ranges instead (the same files
    when there are none)."""
    specs = [
        dataclasses.replace(spec, kind="remote")
        if spec.kind == "cached" and count < WHOLE_SHARD * int(files.counts[shard])
        else spec
        for shard, (spec, count) in enumerate(zip(files.specs, counts.tolist(), strict=True))
    ]
    if specs == files.specs:
        return files
    tables = [files.tables.part(shard, 0, int(count)) for shard, count in enumerate(files.counts)]
    ranged = RecordFiles(
        files.paths, tables, files.storage_options, files.cache, specs=specs, counts=files.counts.tolist()
    )
    ranged.saved_spec = files.saved_spec
    return ranged


def selected_files(
    files: RecordFiles,
    *,
    select: Selection | PathLike | None = None,
    subset: Subset = None,
    seed: int = 0,
    storage_options: StorageOptions = None,
) -> RecordFiles:
    """``files`` as a dataset with ``select=`` and ``subset=`` reads them (``files`` itself when
    both are None): the records the selection keeps, narrowed by ``subset``.

    Raises:
        SelectionError: a selection made for other shards, a subset out of range, or none selected.
    """
    if select is None and subset is None:
        return files
    if isinstance(files, SelectedFiles):
        raise ValueError("these files are a selection already: give select= and subset= to the dataset once")
    selection = None if select is None else _read(select, files, storage_options, "select=")
    if subset is not None:
        selection = _subset(files, subset, selection, seed, storage_options)
    assert selection is not None
    if not len(selection):
        raise SelectionError(f"the selection keeps none of the {files.num_records:,} records")
    return SelectedFiles(files, selection)


def _read(
    given: Selection | PathLike, files: RecordFiles, storage_options: StorageOptions, argument: str
) -> Selection:
    if isinstance(given, Selection):
        selection, name = given, f"the {argument} selection"
    elif isinstance(given, str | os.PathLike):
        selection, name = Selection.read(given, storage_options), repr(os.fspath(given))
    else:
        raise TypeError(
            f"{argument} takes a Selection or a selection file's path, not {type(given).__name__}"
        )
    selection.check(files, name)
    return selection


def _subset(
    files: RecordFiles, subset: Subset, within: Selection | None, seed: int, storage_options: StorageOptions
) -> Selection:
    """The records ``subset`` keeps of ``within`` (every record of ``files`` when None)."""
    size = files.num_records
    pool = len(within) if within is not None else size
    if isinstance(subset, bool):
        raise TypeError("subset= takes a fraction, a count, ranges, record ids or a selection; not a bool")
    if isinstance(subset, float):
        if not 0.0 < subset <= 1.0:
            raise SelectionError(f"subset={subset} must be a fraction in (0, 1]")
        count = round(subset * pool)
        if count == 0:
            raise SelectionError(f"subset={subset} of {pool:,} records keeps none of them")
        return _draw(files, within, count, seed, f"subset={subset}")
    if isinstance(subset, int | np.integer):
        if not 0 < int(subset) <= pool:
            raise SelectionError(f"subset={subset} must be a count of records in [1, {pool:,}]")
        return _draw(files, within, int(subset), seed, f"subset={subset}")
    if isinstance(subset, Selection | str | os.PathLike):
        chosen = _read(subset, files, storage_options, "subset=")
    elif isinstance(subset, range) or (
        isinstance(subset, Sequence) and subset and all(isinstance(r, range) for r in subset)
    ):
        ranges: list[range] = [subset] if isinstance(subset, range) else list(subset)  # type: ignore[arg-type]
        chosen = Selection.from_ranges(files, ranges)
    else:
        array = np.asarray(subset)
        if array.dtype == bool:
            if array.shape != (size,):
                raise SelectionError(f"a mask of the records has {size:,} values, not {array.shape}")
            array = np.flatnonzero(array)
        elif array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
            raise TypeError(
                "subset= takes a fraction, a count, a range or ranges, record ids (1-D ints), a mask "
                f"of the records, or a selection; not {type(subset).__name__} of {array.dtype}"
            )
        try:
            chosen = Selection(shard_prints(files), from_ids(array, size))
        except IndexError as error:
            raise SelectionError(f"subset=: {error}") from None
    return chosen if within is None else within.intersect(chosen)


def _draw(files: RecordFiles, within: Selection | None, count: int, seed: int, how: str) -> Selection:
    """``count`` records drawn at random from ``within`` (or all records): the first ``count``
    places of a permutation keyed by ``seed`` (the same on every rank, worker and epoch)."""
    size = files.num_records
    pool = len(within) if within is not None else size
    bits = np.zeros(-(-size // 8), dtype=np.uint8)
    key = mix_seed(seed, _SUBSET_KEY)
    for first in range(0, count, _DRAW):
        places = permute(np.arange(first, min(count, first + _DRAW), dtype=np.int64), pool, key)
        ids = places if within is None else within.ids.select(places)
        np.bitwise_or.at(bits, ids >> 3, (1 << (ids & 7)).astype(np.uint8))
    parts = IdSetParts(size)
    parts.add_bits(size, bits)
    where = how if within is None or not within.where else f"{within.where}, {how}"
    return Selection(shard_prints(files), parts.build(), where)
