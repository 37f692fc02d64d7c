"""IndexedTFRecordDataset: TFRecord shards as a map-style dataset, any record by its number."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from torch.utils.data import Dataset

from ..codec.decode import SpecArg
from ..records.io import PathLike, StorageOptions
from ..support.seeds import mix_seed
from .pipeline import SeededTransform, decoder_for
from .selected_files import Subset, selected_files
from .selection import Selection
from .shard_index import IndexArg
from .shards import CacheDir, RecordFiles, record_files
from .workers import end_with_parent
from .world import SharedEpoch

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(Dataset[dict[str, Any]]):
    """TFRecord shards as a map-style dataset: record ``i`` of the concatenated shards, by offset.

    Use it with any Sampler (DistributedSampler, random_split, Subset). ``DataLoader`` fetches
    whole batches through :meth:`__getitems__`, which reads and decodes them in one call.
    Files open lazily in the process that reads; pickling never carries an open file.
    GZIP / ZLIB shards are read through their seek points: fast for indices in order (a
    SequentialSampler), slow for random ones (each may inflate up to a seek point's spacing).

    Args:
        sources, spec, context_spec, sequence_spec, index, verify_crc: as for :class:`TFRecordDataset`.
        select, subset: as for :class:`TFRecordDataset`: index ``i`` is then the ``i``-th
            selected record (in file order).
        storage_options, cache_dir, cache_limit: as for :class:`TFRecordDataset`.
        transform: applied to each sample with torch's RNG seeded from (seed, epoch, index).
        seed: seed of the transform's random numbers; :meth:`set_epoch` changes them per epoch.

    Example:
        >>> ds = IndexedTFRecordDataset("val-*.tfrecord", spec={"label": "int"})  # doctest: +SKIP
        >>> ds[0]["label"]  # doctest: +SKIP
        tensor(3)
    """

    def __init__(
        self,
        sources: PathLike | Sequence[PathLike] | RecordFiles,
        *,
        select: Selection | PathLike | None = None,
        subset: Subset = None,
        spec: SpecArg | Literal["raw"] = None,
        context_spec: SpecArg = None,
        sequence_spec: SpecArg = None,
        index: IndexArg = None,
        transform: Callable[..., Any] | None = None,
        seed: int = 0,
        verify_crc: bool = True,
        storage_options: StorageOptions = None,
        cache_dir: CacheDir = None,
        cache_limit: int | str | None = None,
    ) -> None:
        files = record_files(sources, index, storage_options, "raise", cache_dir, cache_limit)
        self.files = selected_files(
            files, select=select, subset=subset, seed=seed, storage_options=files.storage_options
        )
        self.seed = seed
        self._decoder = decoder_for(self.files, spec, context_spec, sequence_spec, verify_crc, "raise")
        self._transform = None if transform is None else SeededTransform(transform)
        self._epoch = SharedEpoch()

    def set_epoch(self, epoch: int) -> None:
        """Changes the transforms' random numbers per epoch; reaches persistent workers."""
        self._epoch.set(epoch)

    def __len__(self) -> int:
        return self.files.num_records

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        end_with_parent()
        n = len(self)
        ids = np.array([int(i) for i in indices], dtype=np.int64)
        if ids.size and (ids.min() < -n or ids.max() >= n):
            bad = next(int(i) for i in ids if not -n <= i < n)
            raise IndexError(f"index {bad} out of range for a dataset of {n} records")
        ids %= max(n, 1)
        epoch = self._epoch.get()
        batch, _, _ = self._decoder.decode_seeded(ids, np.zeros(len(ids), dtype=bool), self.seed, epoch)
        samples = self._decoder.split(batch, len(ids))
        if self._transform is not None:
            samples = [
                self._transform(sample, mix_seed(self.seed, epoch, record_id))
                for sample, record_id in zip(samples, ids.tolist(), strict=True)
            ]
        return samples

    def __repr__(self) -> str:
        return f"IndexedTFRecordDataset({len(self.files.paths)} files, {len(self)} records)"
