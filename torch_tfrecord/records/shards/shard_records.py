"""``ShardRecords``: a dataset's records, read by record id ``0 .. N-1``: the one seam between the
datasets and their shards.

Two kinds stand behind it: :class:`~torch_tfrecord.records.shards.files.RecordFiles` (every record
of some shards, made from a :class:`~torch_tfrecord.records.shards.shard_set.ShardSet`) and a
selection of another's records (:class:`~torch_tfrecord.data.select.selected_files.SelectedFiles`,
which wraps a ``RecordFiles`` and numbers only the records it keeps).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import numpy.typing as npt

from ..reader import OnError
from ..remote.cache import ShardCache
from ..shard_access import ShardSpec
from .pool import ShardPool
from .shard_set import ShardSet
from .tables import ShardTables

__all__ = ["ShardRecords"]


class ShardRecords(ABC):
    """A dataset's records by record id, and what is known of the shards they are in.

    Attributes:
        shards: the shards, as resolved.
        paths, specs, tables, sizes: each shard's path, spec, index table and record stream's size.
        counts, starts: each shard's records here, and the record id of each shard's first.
        storage_options, cache: what the shards are read with.
        feature_spec: the feature spec a manifest saved, or None.
        pool: this process's open shards.
    """

    shards: ShardSet
    paths: list[str]
    specs: list[ShardSpec]
    tables: ShardTables
    sizes: list[int]
    counts: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    storage_options: dict[str, Any]
    cache: ShardCache | None
    feature_spec: dict[str, Any] | None
    pool: ShardPool

    @property
    def num_records(self) -> int:
        return int(self.starts[-1])

    @property
    def shard_sizes(self) -> tuple[int, ...]:
        return tuple(int(count) for count in self.counts)

    @property
    def remote_requests(self) -> int:
        """Ranged requests this process has made to remote files (none for local ones)."""
        return self.pool.requests

    @property
    def cache_bytes(self) -> int:
        """Inflated bytes each compressed shard keeps (a block shuffle's window)."""
        return self.pool.window

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """Identifies the records: a saved place in an epoch is checked against it."""

    @abstractmethod
    def locate(self, record_ids: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(shard, record number in the shard's file)`` of each record id."""

    def describe(self, record_id: int) -> str:
        """``"record 17 of 'train-00001.tfrecord'"``, for error messages."""
        shards, local = self.locate([record_id])
        return f"record {int(local[0])} of {self.paths[int(shards[0])]!r}"

    @abstractmethod
    def read(
        self, record_ids: npt.ArrayLike, *, verify_crc: bool = True, on_error: OnError = "raise"
    ) -> list[bytes | None]:
        """The payloads of the given records, in the given order (None for a damaged one skipped)."""

    @abstractmethod
    def read_framed(
        self, record_ids: npt.ArrayLike, scratch: bytearray | None = None
    ) -> tuple[bytearray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The framed records, back to back in one buffer, with each one's start and size."""

    @abstractmethod
    def hold_window(self, records: int) -> None:
        """Lets each compressed shard keep about ``records`` records inflated."""

    @abstractmethod
    def close(self) -> None:
        """Closes the files this process opened (they reopen on the next read)."""
