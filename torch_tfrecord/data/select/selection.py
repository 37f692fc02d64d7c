"""A selection of records: which records of which shards, as a set of record ids with the shards'
fingerprints, kept in a compact file (``.ttsel``) that refuses to apply to other data.

Record ids count through the shards in their sorted order, as a dataset's do. What a selection
holds is decided by what made it (:func:`torch_tfrecord.select` scanning a filter, a dataset's
``subset=``, :meth:`Selection.from_ids`); a dataset given one reads only those records
(:mod:`.selected_files`). The file's layout is :mod:`.selection_file`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...errors import SelectionError
from ...records.io import PathLike, StorageOptions
from .id_sets import IdSet, IdSetParts, RunSet, from_ids, from_runs
from .selection_file import ShardPrint, decode_selection, encode_selection, read_file, write_file

if TYPE_CHECKING:
    from ...records.shards.files import RecordFiles

__all__ = ["Selection", "ShardPrint", "shard_prints"]


def shard_prints(files: RecordFiles) -> list[ShardPrint]:
    """The fingerprints of ``files``' shards (part of a file says where it starts)."""
    prints = []
    for shard, path in enumerate(files.paths):
        table = files.tables.arrays[shard]  # a table still to fetch is a whole file's
        start = int(table[0, 0]) if len(table) else 0
        prints.append(
            ShardPrint(
                os.path.basename(path.rstrip("/")),
                int(files.sizes[shard]),
                int(files.counts[shard]),
                files.specs[shard].version,
                start,
            )
        )
    return prints


class Selection:
    """Which records of some shards are selected: a set of record ids, with the shards' fingerprints.

    Made by :func:`torch_tfrecord.select` (a filter's matches), by :meth:`from_ids` /
    :meth:`from_ranges`, or read from a file (:meth:`read`); given to a dataset as ``select=`` (or
    ``subset=``), it makes the selected records the dataset's records. Each shard's part is kept
    as runs of ids or as a bitmap, whichever is smaller (in memory and in the file: at most one
    bit per record of the data, so 10^8 records fit in 12.5 MB).

    Args:
        shards: the fingerprints of the shards it was made for, in record-id order.
        ids: the selected record ids (as :class:`~torch_tfrecord.data.select.id_sets.IdSetParts` or
            ``from_ids`` build them: one set, one form, one :attr:`digest`).
        where: how it was made (a filter's text), for people.

    Example:
        >>> files = tt.TFRecordDataset("train-*.tfrecord").files  # doctest: +SKIP
        >>> sel = tt.Selection.from_ranges(files, [range(0, 1000)])  # doctest: +SKIP
        >>> sel.write("first-thousand.ttsel")  # doctest: +SKIP
    """

    def __init__(self, shards: Sequence[ShardPrint], ids: IdSet, where: str = "") -> None:
        self.shards = tuple(shards)
        counts = np.array([shard.records for shard in self.shards], dtype=np.int64)
        self.shard_starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.shard_starts[1:])
        if ids.size != self.num_records:
            raise ValueError(f"a set of ids over {ids.size:,} records for shards of {self.num_records:,}")
        self.ids = ids
        self.where = where
        self._digest: str | None = None

    @classmethod
    def from_ids(cls, files: RecordFiles, ids: npt.ArrayLike, where: str = "") -> Selection:
        """The records ``ids`` (global record ids of ``files``; repeats count once)."""
        prints = shard_prints(files)
        return cls(prints, from_ids(ids, sum(p.records for p in prints)), where)

    @classmethod
    def from_ranges(cls, files: RecordFiles, ranges: Sequence[range], where: str = "") -> Selection:
        """The records of each ``range`` (of global record ids of ``files``, step 1)."""
        prints = shard_prints(files)
        size = sum(p.records for p in prints)
        for one in ranges:
            if not isinstance(one, range) or one.step != 1 or one.start < 0 or one.stop > size:
                raise SelectionError(f"{one!r} is not a range of record ids in [0, {size:,}) with step 1")
        ordered = sorted((r.start, r.stop) for r in ranges if len(r))
        starts: list[int] = []
        stops: list[int] = []
        for start, stop in ordered:  # overlapping ranges merge
            if starts and start <= stops[-1]:
                stops[-1] = max(stops[-1], stop)
            else:
                starts.append(start)
                stops.append(stop)
        return cls(prints, from_runs(starts, stops, size), where)

    @classmethod
    def everything(cls, files: RecordFiles) -> Selection:
        """Every record of ``files``."""
        prints = shard_prints(files)
        size = sum(p.records for p in prints)
        return cls(prints, from_runs([0], [size], size))

    @property
    def num_records(self) -> int:
        """Records of the shards (selected or not)."""
        return int(self.shard_starts[-1])

    def __len__(self) -> int:
        """Records selected."""
        return len(self.ids)

    @property
    def counts(self) -> npt.NDArray[np.int64]:
        """Records selected in each shard."""
        return np.diff(self.ids.rank(self.shard_starts))

    def record_ids(self) -> npt.NDArray[np.int64]:
        """The selected record ids, sorted (one int64 each)."""
        return self.ids.ids()

    @property
    def digest(self) -> str:
        """Identifies the selection: its shards and its ids (not how it was made)."""
        if self._digest is None:
            hashed = hashlib.sha256()
            for shard in self.shards:
                hashed.update(repr(dataclasses.astuple(shard)).encode())
            if isinstance(self.ids, RunSet):
                hashed.update(b"runs" + self.ids.starts.tobytes() + self.ids.stops.tobytes())
            else:
                hashed.update(b"bits" + self.ids.bits.tobytes())  # type: ignore[attr-defined]
            self._digest = hashed.hexdigest()[:32]
        return self._digest

    def check(self, files: RecordFiles, name: str = "the selection") -> None:
        """Raises unless ``files`` are the shards this selection was made for.

        Raises:
            SelectionError: other shards, or shards that changed since (named, with how).
        """
        now = shard_prints(files)
        if len(now) != len(self.shards):
            raise SelectionError(
                f"{name} was made for {len(self.shards):,} shards ({_names(self.shards)}), the dataset has "
                f"{len(now):,} ({_names(now)}): select again from these shards"
            )
        for number, (then, shard) in enumerate(zip(self.shards, now, strict=True)):
            differs = then.differs(shard)
            if differs is not None:
                raise SelectionError(
                    f"{name} was made for other data: shard {number} {files.paths[number]!r} {differs} "
                    "(the shards changed since it was made: select again)"
                )

    def intersect(self, other: Selection) -> Selection:
        """The records both select (of the same shards)."""
        if [s.records for s in self.shards] != [s.records for s in other.shards]:
            raise SelectionError("the two selections were made for different shards")
        parts = IdSetParts(self.num_records)
        step = 1 << 24
        for low in range(0, self.num_records, step):
            high = min(self.num_records, low + step)
            parts.add_mask(self.ids.mask(low, high) & other.ids.mask(low, high))
        return Selection(self.shards, parts.build(), " and ".join(w for w in (self.where, other.where) if w))

    def write(self, path: PathLike, storage_options: StorageOptions = None) -> None:
        """Writes the selection file (whole or not at all), local or a URL."""
        write_file(os.fspath(path), self.to_bytes(), storage_options)

    @classmethod
    def read(cls, path: PathLike, storage_options: StorageOptions = None) -> Selection:
        """Reads a selection file.

        Raises:
            SelectionError: not a selection file, or a damaged one.
        """
        return cls.from_bytes(read_file(os.fspath(path), storage_options), repr(os.fspath(path)))

    def to_bytes(self) -> bytes:
        """The selection file's bytes."""
        return encode_selection(self.shards, self.ids, self.where)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "the selection") -> Selection:
        """A selection from its file's bytes."""
        return cls(*decode_selection(data, name))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Selection) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        how = f", where {self.where!r}" if self.where else ""
        return f"Selection({len(self):,} of {self.num_records:,} records in {len(self.shards):,} shards{how})"


def _names(shards: Sequence[ShardPrint]) -> str:
    names = [shard.name for shard in shards[:3]]
    return ", ".join(names) + (", ..." if len(shards) > 3 else "")
