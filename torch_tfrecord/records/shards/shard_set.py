"""``ShardSet``: a dataset's shards as resolved, once: what every reader of them is built from.

Frozen and free of I/O: each shard's path, spec (what it is: local, remote, cached, compressed),
record count and index table (or a loader of it, where a manifest gave the count), the storage
options and cache they are read with, and the feature spec a manifest saved.
:func:`~torch_tfrecord.records.shards.resolve.resolve_shards` makes one from the user's sources;
:class:`~torch_tfrecord.records.shards.files.RecordFiles` reads records from one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..compressed.index import CompressedIndex
from ..io import StorageOptions
from ..remote.cache import ShardCache
from ..shard_access import ShardSpec
from .index import ShardIndex
from .tables import TableLoader

__all__ = ["ShardSet"]


@dataclasses.dataclass(frozen=True)
class ShardSet:
    """A dataset's shards, resolved.

    Attributes:
        paths: the shards (paths or URLs), in record-id order.
        specs: what each shard is (:class:`~torch_tfrecord.records.shard_access.ShardSpec`).
        tables: each shard's index table or compressed index, or a loader of it.
        counts: each shard's records.
        storage_options: for the fsspec file system of URLs.
        cache: the node's cache of remote shards, or None.
        feature_spec: the feature spec a manifest keeps (as spec.json holds it), or None.
    """

    paths: tuple[str, ...]
    specs: tuple[ShardSpec, ...]
    tables: tuple[ShardIndex | TableLoader, ...]
    counts: tuple[int, ...]
    storage_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    cache: ShardCache | None = None
    feature_spec: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not len(self.paths) == len(self.specs) == len(self.tables) == len(self.counts):
            raise ValueError(
                f"{len(self.paths)} paths, {len(self.specs)} specs, {len(self.tables)} index tables "
                f"and {len(self.counts)} counts: one each per shard"
            )

    @classmethod
    def of(
        cls,
        paths: Sequence[str],
        specs: Sequence[ShardSpec],
        tables: Sequence[ShardIndex | TableLoader],
        counts: Sequence[int] | None = None,
        storage_options: StorageOptions = None,
        cache: ShardCache | None = None,
        feature_spec: dict[str, Any] | None = None,
    ) -> ShardSet:
        """A set from lists; ``counts`` None: each table's length (every table loaded)."""
        if counts is None:
            counts = [len(_plain(table)) for table in tables]
        return cls(
            tuple(paths),
            tuple(specs),
            tuple(tables),
            tuple(int(count) for count in counts),
            dict(storage_options or {}),
            cache,
            feature_spec,
        )

    def pick(self, shards: Sequence[int]) -> ShardSet:
        """The shards numbered ``shards``, in that order."""
        return dataclasses.replace(
            self,
            paths=tuple(self.paths[i] for i in shards),
            specs=tuple(self.specs[i] for i in shards),
            tables=tuple(self.tables[i] for i in shards),
            counts=tuple(self.counts[i] for i in shards),
        )


def _plain(table: Any) -> np.ndarray[Any, Any]:
    plain = table.table if isinstance(table, CompressedIndex) else table
    return np.asarray(plain).reshape(-1, 2)
