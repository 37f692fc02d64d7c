"""A dataset's records when it reads a selection: the selected records of its files, numbered
0, 1, 2 ... in file order, read through the files' indexes.

:class:`SelectedFiles` is the files a dataset reads (so the epoch's plan has N = the records
selected, and every shuffle, rank, worker, resume, mix and framework works as for any files):
each shard keeps its number and holds its selected records, and a read maps the records'
places to the files' record ids (:meth:`~torch_tfrecord.data.select.id_sets.IdSet.select`, one
vectorised call per batch) before the files read them. :func:`selected_files` turns a dataset's
``select=`` / ``subset=`` into one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import SelectionError
from ...records.io import PathLike, StorageOptions
from ...records.reader import OnError
from ...records.shards.files import RecordFiles
from ...records.shards.shard_records import ShardRecords
from ...support.extension import compiled as _native
from .selection import Selection
from .subsets import Subset, chosen_records

__all__ = ["LISTED_BYTES", "WHOLE_SHARD", "SelectedFiles", "selected_files"]

WHOLE_SHARD = 0.25
"""Through the cache, a remote shard of which at least this share of the records is selected is
fetched whole (once per node, then read from disk every epoch); a sparser one is read by ranges
(each epoch fetches only its selected records)."""
LISTED_BYTES = 32 << 20
"""A selection of up to this many bytes of ids (4 M records) is listed once per process, so that
a batch finds its records by one lookup (a bitmap's own select costs tens of microseconds)."""


class SelectedFiles(ShardRecords):
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
        # A view of the base files' records: the reading is theirs (what is known of the shards too).
        self.selection = selection
        self.base = _with_ranged_reads(files, selection.counts)
        base = self.base
        self.paths, self.storage_options, self.cache = base.paths, base.storage_options, base.cache
        self.feature_spec, self.specs, self.pool = base.feature_spec, base.specs, base.pool
        self.shards = base.shards
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

    def read(
        self, record_ids: npt.ArrayLike, *, verify_crc: bool = True, on_error: OnError = "raise"
    ) -> list[bytes | None]:
        return self.base.read(self.record_ids(record_ids), verify_crc=verify_crc, on_error=on_error)

    def read_framed(
        self, record_ids: npt.ArrayLike, scratch: bytearray | None = None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        return self.base.read_framed(self.record_ids(record_ids), scratch)

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
    return RecordFiles(dataclasses.replace(files.shards, specs=tuple(specs), tables=tuple(tables)))


def selected_files(
    files: ShardRecords,
    *,
    select: Selection | PathLike | None = None,
    subset: Subset = None,
    seed: int = 0,
    storage_options: StorageOptions = None,
) -> ShardRecords:
    """``files`` as a dataset with ``select=`` and ``subset=`` reads them (``files`` itself when
    both are None): the records the selection keeps, narrowed by ``subset``.

    Raises:
        SelectionError: a selection made for other shards, a subset out of range, or none selected.
    """
    if select is None and subset is None:
        return files
    if not isinstance(files, RecordFiles):  # (a selection already)
        raise ValueError("these files are a selection already: give select= and subset= to the dataset once")
    selection = chosen_records(files, select, subset, seed, storage_options)
    if not len(selection):
        raise SelectionError(f"the selection keeps none of the {files.num_records:,} records")
    return SelectedFiles(files, selection)
