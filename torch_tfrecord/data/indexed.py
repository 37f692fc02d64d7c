"""IndexedTFRecordDataset: TFRecord shards as a map-style dataset, any record by its number."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from ..codec.decode import SpecArg
from ..records.io import PathLike, StorageOptions
from ..records.shards.files import record_files
from ..records.shards.index import IndexArg
from ..records.shards.resolve import CacheDir
from ..records.shards.shard_records import ShardRecords
from ..support.seeds import mix_seed
from .decoding import SeededTransform, decoder_for
from .epoch.world import SharedEpoch
from .select.selected_files import selected_files
from .select.selection import Selection
from .select.subsets import Subset
from .transport.workers import end_with_parent

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(Dataset[dict[str, Any]]):
    """TFRecord shards as a map-style dataset: record ``i`` of the concatenated shards, by offset.

    Use it with any Sampler (DistributedSampler, random_split, Subset). ``DataLoader`` fetches
    whole batches through :meth:`__getitems__`, which reads and decodes them in one call, then
    splits them into samples; :meth:`read_batch` returns the decoded batch itself (for a
    pipeline of one's own: docs/guides/random-access.md).
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
        sources: PathLike | Sequence[PathLike] | ShardRecords,
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
        ids = self._ids(np.array([int(i) for i in indices], dtype=np.int64))
        epoch = self._epoch.get()
        batch, _, _ = self._decoder.decode_seeded(ids, np.zeros(len(ids), dtype=bool), self.seed, epoch)
        samples = self._decoder.split(batch, len(ids))
        if self._transform is not None:
            samples = [
                self._transform(sample, mix_seed(self.seed, epoch, record_id))
                for sample, record_id in zip(samples, ids.tolist(), strict=True)
            ]
        return samples

    def read_batch(self, indices: Sequence[int] | npt.ArrayLike | torch.Tensor) -> dict[str, Any]:
        """The records at ``indices`` as one batch of decoded columns, read and decoded in one
        native call without Python per record: a pipeline of one's own (a sampler, threads,
        SPDL, torchdata.nodes) gets :class:`TFRecordDataset`'s speed from it.

        The batch is what ``TFRecordDataset(batch_size=...)`` yields for these records: equal
        shapes stacked, variable lengths as :class:`Ragged`, bytes as lists, plus
        ``"_record_id"`` (each record's id in the files) and ``"_padding"`` (all False). Calls
        from several threads at once are safe; the GIL is released while reading and decoding.

        Args:
            indices: record indices (negative ones count from the end), in the order wanted;
                a list, a NumPy array or a tensor.

        Returns:
            The columns, row ``i`` for ``indices[i]``.

        Raises:
            IndexError: an index out of range.
            ValueError: the dataset has a per-sample ``transform`` (it takes samples: use
                :meth:`__getitems__`, or transform the batch yourself).

        Example:
            >>> ds = IndexedTFRecordDataset("val-*.tfrecord", spec={"label": "int"})  # doctest: +SKIP
            >>> ds.read_batch([7, 0, 3])["label"]  # doctest: +SKIP
            tensor([1, 3, 0])
        """
        if self._transform is not None:
            raise ValueError(
                "read_batch returns decoded columns, and this dataset's transform takes samples: "
                "use __getitems__, or give no transform and transform the batch yourself"
            )
        ids = self._ids(np.asarray(indices, dtype=np.int64).reshape(-1))
        return self._decoder.batch(ids, np.zeros(len(ids), dtype=bool), self.seed, self._epoch.get())

    def _ids(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Indices as record ids in ``[0, len)``."""
        end_with_parent()
        n = len(self)
        if indices.size and (indices.min() < -n or indices.max() >= n):
            bad = next(int(i) for i in indices if not -n <= i < n)
            raise IndexError(f"index {bad} out of range for a dataset of {n} records")
        return indices % max(n, 1)

    def __repr__(self) -> str:
        return f"IndexedTFRecordDataset({len(self.files.paths)} files, {len(self)} records)"
