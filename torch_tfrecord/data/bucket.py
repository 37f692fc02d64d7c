"""``tt.bucket``: sequences batched with others of similar length, split exactly over ranks.

Wiring only: :mod:`.grouping.sequences` reads the dataset's sequence lengths once, :mod:`.grouping.buckets`
makes each epoch's batches (a pure function of the epoch's order and the lengths), and
:mod:`.grouping.group_datasets` splits the batches over ranks and workers through the epoch driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..codec.payloads import LENGTHS_KEY
from ..records.io import PathLike
from .decoding import PADDING_KEY
from .epoch.driver import DEFAULT_PREFETCH, EpochDataset
from .frameworks.detect import Wrapper
from .grouping.buckets import BucketedEpoch, BucketOptions, plan_buckets
from .grouping.group_datasets import GroupedDataset
from .grouping.groups import Groups, Int64Array
from .grouping.lengths import TokenColumn, token_column
from .grouping.packed_rows import sample_columns
from .transport.collate import collate_columns

__all__ = ["BucketStats", "BucketedDataset", "bucket"]


@dataclasses.dataclass(frozen=True)
class BucketStats:
    """What an epoch's buckets did with its sequences (all ranks together).

    Attributes:
        epoch: the epoch.
        sequences: sequences in the epoch.
        batches: batches they make (before ``drop_last`` or padding).
        per_bucket: each bucket's ``(batches, sequences)``.
        dropped_batches: batches that ``drop_last=True`` leaves out (fewer than one per rank).
        dropped_sequences: sequences in those batches.
        padding_batches: repeated batches (marked ``"_padding"``) that even out the ranks.
    """

    epoch: int
    sequences: int
    batches: int
    per_bucket: list[tuple[int, int]]
    dropped_batches: int
    dropped_sequences: int
    padding_batches: int


@dataclasses.dataclass
class _Read:
    """A batch read in the loading thread, collated in the loop's thread (after the dataset's transform)."""

    loaded: list[Any]
    ids: Int64Array
    padding: bool
    bucket: int


class BucketedDataset(GroupedDataset):
    """Batches of sequences of similar length, as tf.data's ``bucket_by_sequence_length``, split
    exactly over DDP ranks and DataLoader workers.

    Each epoch, the sequences of the dataset's epoch (its records in its order; a mix's places)
    go to buckets by length (their longest key): bucket ``i`` holds lengths in
    ``[boundaries[i - 1], boundaries[i])``, the last bucket all longer ones. Each bucket's
    sequences, in order, form batches of its batch size; a batch comes at the place of its last
    sequence, each bucket's last partial batch at the end of the epoch. Every sequence is in
    exactly one batch on exactly one rank; every rank gets the same number of batches (``len()``
    is exact: with ``drop_last=False`` the ranks are evened out with repeated batches marked
    ``"_padding"``, with True fewer than one batch per rank is left out); the batches are a pure
    function of the dataset's order and the lengths, so any number of workers gives the same,
    and ``state_dict`` resumes exactly, also on another number of ranks.

    A batch is the dataset's batch of those records (every feature it decodes, with
    ``"_record_id"`` and ``"_padding"``), each bucketed key a ``[B, T]`` tensor padded with
    ``pad_id`` (T: the batch's longest, or the bucket's boundary - 1 with
    ``pad_to_bucket_boundary``) and ``"_lengths"``: ``{key: int64 [B]}``. Use
    ``DataLoader(dataset, batch_size=None)``.

    Args:
        dataset: a :class:`~torch_tfrecord.TFRecordDataset` or ``tt.mix`` of them, made
            without ``batch_size``, whose ``keys`` are 1-D integer sequences.
        boundaries: increasing lengths where the buckets end.
        batch_sizes: each bucket's batch size (``len(boundaries) + 1`` of them).
        keys: the keys whose longest gives a sequence's length, padded in the batch.
        pad_to_bucket_boundary: pad to the bucket's boundary - 1 instead of the batch's longest
            (the last bucket: its longest).
        pad_id: the padding value.
        drop_last, rank, world_size, prefetch, threads, process: as for
            :class:`~torch_tfrecord.TFRecordDataset` (the rank and world size are the dataset's
            when neither is given).
        lengths_cache: as for :class:`~torch_tfrecord.PackedDataset`.

    Example:
        >>> source = tt.TFRecordDataset("train-*.tfrecord", spec={"inputs": "int"})  # doctest: +SKIP
        >>> buckets = tt.bucket(source, [64, 128, 256], [64, 32, 16, 8], keys=["inputs"])  # doctest: +SKIP
        >>> for batch in DataLoader(buckets, batch_size=None, num_workers=4): ...  # doctest: +SKIP
    """

    _FORMAT = "torch_tfrecord.BucketedDataset/1"

    def __init__(
        self,
        dataset: EpochDataset,
        boundaries: Sequence[int],
        batch_sizes: Sequence[int],
        keys: Sequence[str] = ("inputs", "targets"),
        *,
        pad_to_bucket_boundary: bool = False,
        pad_id: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        lengths_cache: PathLike | None = None,
        threads: int = 0,
        process: bool = False,
    ) -> None:
        self.options = BucketOptions(tuple(boundaries), tuple(batch_sizes))
        if isinstance(pad_id, bool) or not isinstance(pad_id, int):
            raise ValueError(f"{pad_id=} must be an int")
        self.pad_id = pad_id
        self.pad_to_bucket_boundary = bool(pad_to_bucket_boundary)
        super().__init__(
            dataset, (keys,) if isinstance(keys, str) else keys, batch_size=1, drop_last=drop_last, rank=rank,
            world_size=world_size, prefetch=prefetch, loader_batch_size=None, lengths_cache=lengths_cache,
            threads=threads, process=process,
        )  # fmt: skip

    def _group(self, lengths: Int64Array) -> tuple[Groups, BucketedEpoch]:
        planned = plan_buckets(lengths, self.options)
        return planned.batches, planned

    def _options(self) -> dict[str, Any]:
        return {
            "boundaries": list(self.options.boundaries),
            "batch_sizes": list(self.options.batch_sizes),
            "keys": list(self.keys),
        }

    def _check_wrapper(self, wrapper: Wrapper | None) -> None:
        super()._check_wrapper(wrapper)
        if wrapper is not None and wrapper.kind == "dispatcher" and self.plan.world_size > 1:
            raise ValueError(
                "under Accelerate's DataLoaderDispatcher, length buckets cannot be dispatched: their "
                "batches differ in size and length, which the dispatcher would concatenate and cut "
                "across ranks; use DataLoaderConfiguration(dispatch_batches=False) or a plain DataLoader"
            )

    def load(self, ids: Int64Array, padding: npt.NDArray[np.bool_], epoch: int, batched: bool) -> list[Any]:
        """Batch ``ids[0]`` of ``epoch``, read (and padded here, when the dataset has no transform)."""
        found = self.epoch_groups(epoch)
        group = int(ids[0])
        positions = found.groups.pieces([group])[1]
        records = found.ids[positions]
        bucket = int(found.details.buckets[group])
        if not self.sequences.plain:
            return [_Read(self.sequences.load(records, epoch), records, bool(padding[0]), bucket)]
        batch = self.dataset.load(records, np.full(len(records), bool(padding[0])), epoch, True)[0]
        describe = self._describer(records, epoch)
        columns = {key: token_column(batch, key, len(records), describe) for key in self.keys}
        return [self._padded(batch, columns, records, bucket, epoch)]

    def finish(self, loaded: Any, epoch: int) -> dict[str, Any]:
        """A batch: collated now if :meth:`load` left it to the loop's thread."""
        if not isinstance(loaded, _Read):
            return loaded  # type: ignore[no-any-return]
        samples = [self.sequences.finish(item, epoch) for item in loaded.loaded]
        columns = sample_columns(samples, self.keys, self._describer(loaded.ids, epoch))
        batch = collate_columns(samples)
        batch[PADDING_KEY] = torch.full((len(samples),), loaded.padding)
        return self._padded(batch, columns, loaded.ids, loaded.bucket, epoch)

    def _describer(self, records: Int64Array, epoch: int) -> Any:
        return lambda at: self.sequences.describe(int(records[at]), epoch)

    def _padded(
        self,
        batch: dict[str, Any],
        columns: Mapping[str, TokenColumn],
        records: Int64Array,
        bucket: int,
        epoch: int,
    ) -> dict[str, Any]:
        """``batch`` with each key a dense ``[B, T]`` tensor, and its lengths under ``"_lengths"``."""
        found = np.stack([columns[key][1] for key in self.keys], axis=1)
        stand_in = np.asarray(batch[PADDING_KEY], dtype=bool)  # a damaged record's stand-in, kept
        expected = self.sequences.lengths(records, epoch)
        self.sequences.check_read(np.where(stand_in[:, None], expected, found), records, epoch)
        lengths = {}
        for key in self.keys:
            values, counts = columns[key]
            width = int(counts.max(initial=0))
            if self.pad_to_bucket_boundary and bucket < len(self.options.boundaries):
                width = self.options.boundaries[bucket] - 1
            dense = np.full((len(counts), width), self.pad_id, dtype=values.dtype)
            rows = np.repeat(np.arange(len(counts)), counts)
            dense[rows, np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)] = values
            batch[key] = torch.from_numpy(dense)
            lengths[key] = torch.from_numpy(counts)
        batch[LENGTHS_KEY] = {**(batch.get(LENGTHS_KEY) or {}), **lengths}
        return batch

    def bucket_stats(self, epoch: int | None = None) -> BucketStats:
        """What the buckets of ``epoch`` (default: the current one) did with its sequences."""
        epoch = self.epoch if epoch is None else epoch
        found = self.epoch_groups(epoch)
        planned: BucketedEpoch = found.details
        count = len(self.options.batch_sizes)
        batches = np.bincount(planned.buckets, minlength=count)
        sequences = np.bincount(planned.buckets, weights=found.groups.sizes, minlength=count)
        dropped_batches, dropped_sequences, padding_batches = self._left_out(epoch)
        return BucketStats(
            epoch=epoch,
            sequences=len(found.ids),
            batches=found.groups.count,
            per_bucket=[(int(b), int(s)) for b, s in zip(batches, sequences, strict=True)],
            dropped_batches=dropped_batches,
            dropped_sequences=dropped_sequences,
            padding_batches=padding_batches,
        )

    def __repr__(self) -> str:
        return (
            f"BucketedDataset({self.plan.num_records} batches in epoch 0, boundaries "
            f"{list(self.options.boundaries)}, rank {self.plan.rank}/{self.plan.world_size})"
        )


bucket = BucketedDataset
"""``tt.bucket(dataset, [64, 128, 256], [64, 32, 16, 8], keys=["inputs"])``: :class:`BucketedDataset`."""
