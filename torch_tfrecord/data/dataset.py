"""TFRecordDataset: the iterable dataset, sharded over ranks and workers.

Wiring only: :mod:`.order` decides which records each (epoch, rank, worker) gets,
:mod:`..records.shards.files` reads them, :mod:`.decoding` decodes them, :mod:`.epoch` drives the epochs
(workers, frameworks, prefetch, the place to resume from).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..codec.decode import SpecArg
from ..records.io import PathLike, StorageOptions
from ..records.reader import OnError
from ..records.shards.files import record_files
from ..records.shards.index import IndexArg
from ..records.shards.resolve import CacheDir
from ..records.shards.shard_records import ShardRecords
from .decoding import SeededTransform, check_transform_threads, decoder_for, transformed
from .epoch.driver import DEFAULT_PREFETCH, EpochDataset
from .epoch.world import resolve_world
from .order.plan import EpochPlan, Progress, Shuffle, WorkerSlice, block_size
from .order.schedule import ReadSchedule
from .select.selected_files import selected_files
from .select.selection import Selection
from .select.subsets import Subset

__all__ = ["TFRecordDataset"]

logger = logging.getLogger(__name__)

class TFRecordDataset(EpochDataset):
    """TFRecord shards as an iterable dataset, split exactly over DDP ranks and DataLoader workers.

    Each epoch, every record is read exactly once across all ranks and workers; every rank gets
    the same number of samples (and batches); the order is a pure function of (seed, epoch,
    number of records, position); and the place in an epoch can be saved and restored.

    Every sample (or batch) carries two extra keys: ``"_record_id"`` (the record's place in the
    concatenated shards) and ``"_padding"`` (True for a repeated record that pads the epoch with
    ``drop_last=False``, or stands in for a damaged one with ``on_error="skip"``).

    Args:
        sources: files, globs, directories or URLs such as ``"s3://bucket/train-*.tfrecord"``
            (sorted, so every rank sees the same list), or a
            :class:`~torch_tfrecord.records.shards.shard_records.ShardRecords` (records read by id: e.g. a
            TFDS split's ranges of records, or a selection).
        select: read only the records of a selection: a selection file's path (made by
            :func:`torch_tfrecord.select` or ``tfrecord-index select``) or a
            :class:`~torch_tfrecord.Selection`, made for these shards (a selection of other or
            changed shards is refused). Its records are then the dataset's: every promise holds
            over them, and only their bytes are read.
        subset: read only some records (of the selection, with ``select``): a fraction
            (``0.1``) or a count (``5000``) drawn at random from ``seed``, once (the same every
            epoch, on every rank and worker); a ``range`` or a list of ranges of record ids;
            record ids; a boolean mask of the records; or a selection as for ``select``. See
            the guide "Selecting records". ``"_record_id"`` stays each record's id in the files.
        spec: feature specs (see :func:`decode_batch`); None decodes every feature as VarLen;
            ``"raw"`` decodes nothing: each sample is ``{"record": bytes, ...}`` (a batch
            ``{"record": [bytes, ...], ...}``) for a ``transform`` that parses its own format.
        context_spec, sequence_spec: instead of ``spec``, for ``tf.train.SequenceExample``
            records: the specs of the context features and of the feature lists (FixedLenSequence
            or VarLen). A batch pads the feature lists like TensorFlow's
            ``tf.io.parse_sequence_example`` and holds their step counts in ``"_lengths"``
            (see :class:`torch_tfrecord.codec.payloads.SequencePayload`).
        index: where the indexes are: None (``<path>.idx`` when it exists, which must be fresh,
            else the file is scanned once in memory), a pattern like ``"/idx/{name}.idx"``, a
            mapping or a function; see :data:`torch_tfrecord.records.shards.files.IndexArg`.
        shuffle: ``"global"`` (a permutation of all records), ``"shards"`` (shard order
            shuffled, records in file order: for slow storage), ``"block:K"`` (shard order
            shuffled, records permuted within each window of K consecutive records: random
            order at the cost of sequential reads, for compressed and remote shards) or False.
            GZIP / ZLIB shards are read through their seek points: with False, ``"shards"`` and
            ``"block:K"`` each window is inflated once; ``"global"`` inflates up to a seek
            point's spacing per record, which is slow.
        seed: seed of the shuffle and of the transforms' random numbers.
        samples_per_epoch: samples per epoch over all ranks, None for one pass over the records.
            A shorter epoch goes on through the pass where the previous epoch stopped (every
            record is read before any is repeated), a longer one starts the next pass (another
            permutation); split over the ranks like a pass (``drop_last``).
        batch_size: yield decoded batches of this size (use ``DataLoader(batch_size=None)``);
            the fast path. None yields samples (use ``collate_fn=tt.collate``).
        drop_last: True drops fewer than one global batch (other records each epoch when
            shuffled); False pads with repeated records marked ``_padding``.
        transform: applied to each sample (each batch in batch mode) with torch's RNG seeded
            from (seed, epoch, record id); one that takes ``generator=`` gets a seeded Generator.
        rank, world_size: override torch.distributed / RANK / WORLD_SIZE.
        on_error: "raise", or "skip": a damaged record is logged and replaced by another record
            of its batch, marked ``_padding``, so counts stay equal.
        verify_crc: check every record's CRCs.
        storage_options: for the fsspec file system of URLs (credentials, endpoint ...).
        cache_dir: where remote shards are cached, each fetched whole once per node and then
            read as a local file (any shuffle then fetches about the data's size per epoch):
            None, a temporary directory removed at exit; a directory, shared by every process
            that names it (ranks, workers, other jobs) and kept; False, no cache (ranged reads).
        cache_limit: the most bytes the cache holds (``"50GB"`` or an int); None: the disk's
            free space less a margin. See the remote storage guide.
        prefetch: iterated in the main process (``num_workers=0``), how many batches (sample
            mode: reads of one loader batch, or of about 64 records) a background thread reads
            and decodes ahead of the loop, while it trains (reading, decoding and image decoding
            release the GIL); 0 loads each batch when the loop asks for it. Batches that load
            in well under 2 ms (small Examples) are handed over in runs of up to 16, about 2 ms
            of work each (a hand-off per batch cost as much in wake-ups as such a batch), so
            ``prefetch`` then counts runs (see the performance guide). The transform still
            runs in the loop's thread, and the batches, their order and :meth:`state_dict`
            (what the loop received) are the same either way. DataLoader workers ignore it.
        threads: iterated in the main process, how many threads read and decode that many
            batches at once (their native work releases the GIL), handed to the loop in the
            epoch's order, at most ``threads + prefetch`` batches (or runs, as for ``prefetch``)
            ahead: the same batches in the same order, and the same :meth:`state_dict`, as with
            0 threads or with DataLoader workers.
            Faster than workers where the decode is native (Examples, ``tt.Image``), since no
            batch crosses a process; see the performance guide for when to use which. 0 (the
            default): the one prefetch thread. DataLoader workers ignore it.
        transform_threads: with ``threads``, run ``transform`` on those threads instead of the
            loop's thread. The transform must take ``generator=`` and draw its random numbers
            from it (torch's global RNG, the training loop's too, is not seeded there); Python
            code holds the GIL on a regular CPython, so it gains where the transform's work is
            torch ops (which release it) or on a free-threaded CPython.
        process: iterated in the main process, run that loading (``threads``, or the prefetch
            thread) in one separate process, batches handed over through shared memory, so that
            the training loop's process keeps its GIL and cores: the same batches, order and
            :meth:`state_dict`; the transform still runs in the loop's thread unless
            ``transform_threads``. See the performance guide.
        loader_batch_size: in sample mode, the ``batch_size`` of the DataLoader that will batch
            the samples, so that each worker reads whole loader batches and every rank gets the
            same number of them. Found from the loader itself when None, in a DataLoader as torch
            builds it (see :func:`~torch_tfrecord.data.loader.loader` to build one for it).

    Example:
        >>> ds = TFRecordDataset("train-*.tfrecord", spec={"label": "int"}, batch_size=256)  # doctest: +SKIP
        >>> loader = DataLoader(ds, batch_size=None, num_workers=4, persistent_workers=True)  # doctest: +SKIP
        >>> for epoch in range(10):  # doctest: +SKIP
        ...     ds.set_epoch(epoch)
        ...     for batch in loader: ...
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
        shuffle: Shuffle = "global",
        seed: int = 0,
        batch_size: int | None = None,
        drop_last: bool = True,
        samples_per_epoch: int | None = None,
        transform: Callable[..., Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        on_error: OnError = "raise",
        verify_crc: bool = True,
        storage_options: StorageOptions = None,
        cache_dir: CacheDir = None,
        cache_limit: int | str | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        loader_batch_size: int | None = None,
        threads: int = 0,
        transform_threads: bool = False,
        process: bool = False,
    ) -> None:
        files = record_files(sources, index, storage_options, on_error, cache_dir, cache_limit)
        self.files = selected_files(
            files, select=select, subset=subset, seed=seed, storage_options=files.storage_options
        )
        found_rank, found_size = resolve_world(rank, world_size)
        plan = EpochPlan(
            self.files.shard_sizes,
            world_size=found_size,
            rank=found_rank,
            batch_size=batch_size,
            drop_last=drop_last,
            shuffle=shuffle,
            seed=seed,
            samples_per_epoch=samples_per_epoch,
        )
        super().__init__(
            plan,
            prefetch=prefetch,
            shuffled=shuffle is not False,
            loader_batch_size=loader_batch_size,
            threads=threads,
            transform_threads=transform_threads,
            process=process,
        )
        window = block_size(shuffle)
        if window is not None:
            self.files.hold_window(window)
        self._decoder = decoder_for(self.files, spec, context_spec, sequence_spec, verify_crc, on_error)
        self._transform = None if transform is None else SeededTransform(transform)
        check_transform_threads(self._transform, transform_threads)
        if self.plan.dropped:
            logger.info(
                "drop_last: %d of %d samples left out of each epoch", self.plan.dropped, self.plan.epoch_size
            )
        if self.plan.units_per_rank == 0 and self.plan.num_records:
            logger.warning(
                "%d samples per epoch are fewer than one global batch (%d ranks x %d): every epoch "
                "is empty with drop_last=True",
                self.plan.epoch_size,
                self.plan.world_size,
                self.plan.unit,
            )

    @property
    def num_records(self) -> int:
        """Records in all shards together (with ``select`` or ``subset``: the records selected)."""
        return self.plan.num_records

    def load(
        self, ids: npt.NDArray[np.int64], padding: npt.NDArray[np.bool_], epoch: int, batched: bool
    ) -> list[dict[str, Any]]:
        """The records ``ids``, read and decoded, not transformed: one batch or one sample each."""
        if batched:
            return [self._decoder.batch(ids, padding, self.plan.seed, epoch)]
        return self._decoder.samples(ids, padding, self.plan.seed, epoch)

    def load_batches(
        self, parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]], epoch: int
    ) -> list[dict[str, Any]] | None:
        """Batches of small records read and decoded in one native call (see BatchDecoder.batches)."""
        return self._decoder.batches(parts, self.plan.seed, epoch)

    def finish(self, loaded: Any, epoch: int) -> Any:
        """A loaded batch or sample after the transform, its RNG seeded from (seed, epoch, record id)."""
        return transformed(self._transform, loaded, self.plan.seed, epoch)

    def guard_spec(self) -> Mapping[str, Any] | None:
        return self._decoder.feature_spec

    def _read_schedule(
        self, plan: EpochPlan, epoch: int, workers: WorkerSlice, progress: Progress, skip: int
    ) -> ReadSchedule:
        return ReadSchedule(self.files, plan, epoch, workers, progress, skip)

    def read_batch(self, ids: npt.ArrayLike, padding: npt.ArrayLike, epoch: int) -> dict[str, Any]:
        """The records ``ids`` as one batch, decoded and transformed as this dataset does in batch mode.

        Args:
            ids: record ids (places in the concatenated shards).
            padding: the batch's ``"_padding"`` flags.
            epoch: the epoch of the transform's random numbers (seeded from seed, epoch, ids[0]).
        """
        loaded = self.load(np.asarray(ids, dtype=np.int64), np.asarray(padding, dtype=bool), epoch, True)
        return self.finish(loaded[0], epoch)  # type: ignore[no-any-return]

    def read_samples(
        self, ids: npt.ArrayLike, padding: npt.ArrayLike, epoch: int
    ) -> Iterator[dict[str, Any]]:
        """The records ``ids`` as samples, decoded and transformed as this dataset does in sample mode."""
        loaded = self.load(np.asarray(ids, dtype=np.int64), np.asarray(padding, dtype=bool), epoch, False)
        return (self.finish(sample, epoch) for sample in loaded)

    def _identity(self, plan: EpochPlan) -> dict[str, Any]:
        return {  # checked in this order: the most telling difference is named first
            "num_records": plan.num_records,
            "seed": plan.seed,
            "shuffle": plan.shuffle,
            "world_size": plan.world_size,
            "rank": plan.rank,
            "batch_size": plan.batch_size,
            "drop_last": plan.drop_last,
            "samples_per_epoch": plan.samples_per_epoch,
            "fingerprint": self.files.fingerprint,
        }

    def __repr__(self) -> str:
        plan = self.plan
        return (
            f"TFRecordDataset({len(self.files.paths)} files, {plan.num_records} records, rank {plan.rank}/"
            f"{plan.world_size}, batch_size={plan.batch_size}, shuffle={plan.shuffle!r}, seed={plan.seed})"
        )
