"""TFRecordDataset: the iterable dataset, sharded over ranks and workers.

Wiring only: :mod:`.order` decides which records each (epoch, rank, worker) gets,
:mod:`.shards` reads them, :mod:`.pipeline` decodes them, :mod:`.resume` keeps the place.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from ..codec.decode import SpecArg
from ..records.io import PathLike, StorageOptions
from ..records.reader import OnError
from .cache_plan import ReadSchedule
from .epochs import EpochCounter
from .frameworks import DISPATCHED_STATE, DispatchFlag, calling_wrapper, warn_unknown_versions
from .guards import EpochGuard, check_loader
from .loader import calling_fetcher, requested_batch_size, use_fast_convert
from .order import EpochPlan, Progress, Shuffle, WorkerSlice, block_size
from .packing import pack_tensors
from .pipeline import PADDING_KEY, SeededTransform, decoder_for, transformed
from .prefetch import Prefetcher
from .remote_shards import CacheDir
from .resume import Live, Resume, combine_states, load_state, rank_state, resume_point
from .shard_index import IndexArg
from .shards import RecordFiles, record_files
from .workers import end_with_parent
from .world import resolve_world
from .wrapped import shard_runs, world_items, wrapped_len

__all__ = ["TFRecordDataset"]

logger = logging.getLogger(__name__)

DEFAULT_PREFETCH = 2
"""Batches loaded ahead in the main process: enough to hide loading behind a step (see bench_overlap)."""
_SAMPLE_CHUNK = 64  # sample mode: records a worker reads and decodes at once


def _reading(run: int) -> int:
    """Units read and decoded at once: whole runs of ``run``, about ``_SAMPLE_CHUNK`` of them."""
    return run * max(1, _SAMPLE_CHUNK // run)


class TFRecordDataset(IterableDataset[dict[str, Any]]):
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
            :class:`~torch_tfrecord.data.shards.RecordFiles` (e.g. a selection of records).
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
            mapping or a function; see :data:`torch_tfrecord.data.shards.IndexArg`.
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
            release the GIL); 0 loads each batch when the loop asks for it. The transform still
            runs in the loop's thread, and the batches, their order and :meth:`state_dict`
            (what the loop received) are the same either way. DataLoader workers ignore it.

    Example:
        >>> ds = TFRecordDataset("train-*.tfrecord", spec={"label": "int"}, batch_size=256)  # doctest: +SKIP
        >>> loader = DataLoader(ds, batch_size=None, num_workers=4, persistent_workers=True)  # doctest: +SKIP
        >>> for epoch in range(10):  # doctest: +SKIP
        ...     ds.set_epoch(epoch)
        ...     for batch in loader: ...
    """

    def __init__(
        self,
        sources: PathLike | Sequence[PathLike] | RecordFiles,
        *,
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
    ) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"{prefetch=} must be an int >= 0")
        self.prefetch = prefetch
        self.files = record_files(sources, index, storage_options, on_error, cache_dir, cache_limit)
        found_rank, found_size = resolve_world(rank, world_size)
        self.plan = EpochPlan(
            self.files.shard_sizes,
            world_size=found_size,
            rank=found_rank,
            batch_size=batch_size,
            drop_last=drop_last,
            shuffle=shuffle,
            seed=seed,
            samples_per_epoch=samples_per_epoch,
        )
        window = block_size(shuffle)
        if window is not None:
            self.files.hold_window(window)
        self._decoder = decoder_for(self.files, spec, context_spec, sequence_spec, verify_crc, on_error)
        self._transform = None if transform is None else SeededTransform(transform)
        self._epoch = EpochCounter()
        self._dispatch = DispatchFlag()
        self._epoch_guard = EpochGuard(shuffle is not False)
        self._resume: Resume | None = None
        self._live: Live | None = None
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
        """Records in all shards together."""
        return self.plan.num_records

    @property
    def epoch(self) -> int:
        """The epoch in progress (before the first pass: the first epoch)."""
        return self._epoch.current()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (call it in the main process before each epoch); reaches persistent workers.

        Optional: without it each pass over the dataset is the next epoch (0, 1, 2, ...), for the
        training frameworks that never call it. Once called, its epoch decides, until called again.
        A state loaded for another epoch is let go: the new epoch starts from its beginning.
        """
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper, clear=True)
        if wrapper is not None:
            wrapper.check(self.plan.world_size, self.plan.rank, self.plan.batch_size is not None)
        self._epoch.set(epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def __len__(self) -> int:
        """Batches (batch mode) or samples this rank gets per epoch (in the current one, if resumed).

        Under a DataLoader of ``batch_size=B`` in sample mode, the rank gets exactly
        ``ceil(len(dataset) / B)`` batches, ``len(loader)``, with any number of workers (each
        worker takes runs of B samples). Asked by an Accelerate wrapper, it is the length that
        makes the wrapper's own ``len`` the batches each rank gets.
        """
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper)
        if wrapper is not None:
            wrapper.check(self.plan.world_size, self.plan.rank, self.plan.batch_size is not None)
        units = self._plan_for(self._epoch.current()).units_per_rank
        shard_run = wrapper.run if wrapper is not None and wrapper.kind == "shard" else None
        return wrapped_len(units, self.plan.world_size, self._dispatch.get(), shard_run)

    def _plan_for(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch``: narrowed to what was left of it when a global state was loaded."""
        resume = self._resume
        if resume is not None and resume.epoch == epoch and resume.rest is not None:
            return dataclasses.replace(self.plan, rest=resume.rest)
        return self.plan

    def __iter__(self) -> Iterator[dict[str, Any]]:
        end_with_parent()  # now, as the worker creates its fetcher: not at its first batch request
        fetcher = calling_fetcher()
        batch_mode = self.plan.batch_size is not None
        check_loader(fetcher, batch_mode, self._decoder.spec)
        use_fast_convert(fetcher)
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper)
        if wrapper is not None:
            wrapper.check(self.plan.world_size, self.plan.rank, batch_mode)
        if get_worker_info() is None:
            warn_unknown_versions()
        resume = self._resume
        # Counted now, as a DataLoader creates its fetcher: every worker of a pass begins it.
        epoch = self._epoch.begin(None if resume is None or resume.workers is None else resume.epoch)
        if self._dispatch.get() and self.plan.world_size > 1:
            return self._serve_world(epoch)
        if wrapper is not None and wrapper.kind == "shard":
            before = self.plan.rank * wrapper.run
            after = (self.plan.world_size - self.plan.rank - 1) * wrapper.run
            return shard_runs(self._iterate(epoch, wrapper.run), wrapper.run, before, after, PADDING_KEY)  # type: ignore[return-value]
        return self._iterate(epoch, None)

    def _iterate(self, epoch: int, run: int | None) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        plan = self._plan_for(epoch)
        if plan.batch_size is None and run is None:
            run = requested_batch_size()  # the loader's batches: workers take runs of them
        chunk = 1 if plan.batch_size else (run or _SAMPLE_CHUNK)
        workers = WorkerSlice(info.num_workers, info.id, chunk) if info else WorkerSlice(1, 0, chunk)
        self._epoch_guard.starting(epoch, self._resume is not None and self._resume.epoch == epoch)
        progress, skip = resume_point(self._resume, epoch, workers)
        live = self._live = Live(epoch, progress, workers, skip)
        loads: Generator[list[dict[str, Any]], None, None] | Prefetcher[list[dict[str, Any]]]
        loads = self._loads(plan, workers, progress, skip, epoch)
        if info is None and self.prefetch:  # loaded ahead in a thread, while the loop trains
            loads = Prefetcher(loads, self.prefetch)
        pack = info is not None and plan.batch_size is not None
        try:
            # The transform runs here, in the loop's thread (it may draw from torch's global RNG,
            # which the loop uses too), and the place is counted here: what the loop received.
            for loaded in loads:
                for item in loaded:
                    item = transformed(self._transform, item, plan.seed, epoch)
                    if pack:  # a batch is sent to the main process as one block (see _packing)
                        item = pack_tensors(item)
                    live.yielded += 1  # counted before the yield: a state taken now includes it
                    yield item
        finally:
            loads.close()  # a loop left early stops the loading
        self._epoch_guard.finished(epoch)
        if info is None and self._resume is not None and self._resume.epoch == epoch:
            self._resume = None  # the resumed epoch is over; iterating it again starts it afresh

    def _loads(
        self, plan: EpochPlan, workers: WorkerSlice, progress: Progress, skip: int, epoch: int
    ) -> Generator[list[dict[str, Any]], None, None]:
        """The rank's share of the epoch from ``progress`` on, read and decoded, not transformed:
        one list per read, of one batch (batch mode) or of samples."""
        schedule = ReadSchedule(self.files, plan, epoch, workers, progress, skip)  # for the cache
        remaining = progress.remaining(plan.units_per_rank)
        size, seed = plan.batch_size, plan.seed
        # Batch mode: the order of 16 batches is computed at once (numpy calls cost per call).
        for block in workers.items(remaining, skip, block=16 if size else _reading(workers.chunk)):
            units = progress.units(block)
            if size:
                ids, padding = plan.records(plan.unit_positions(units), epoch)
                for at in range(0, len(ids), size):
                    schedule.reached(block[at // size])
                    yield [self._decoder.batch(ids[at : at + size], padding[at : at + size], seed, epoch)]
            else:
                schedule.reached(block[0])
                yield self._decoder.samples(*plan.records(units, epoch), seed, epoch)
        schedule.finished()

    def _serve_world(self, epoch: int) -> Iterator[dict[str, Any]]:
        """Under Accelerate's DataLoaderDispatcher: on rank 0, every rank's units in the order in
        which the dispatcher hands them out (see :mod:`.wrapped`); nothing on the other ranks."""
        plan = self._plan_for(epoch)
        if plan.rank != 0:
            return  # only rank 0's loader is iterated; the others would read for nothing
        if self._resume is not None and self._resume.epoch == epoch:
            raise ValueError(DISPATCHED_STATE)
        info = get_worker_info()
        run = 1 if plan.batch_size else (requested_batch_size() or 1)
        workers = WorkerSlice(info.num_workers, info.id, run) if info else WorkerSlice(1, 0, run)
        rank_plans = [dataclasses.replace(plan, rank=rank) for rank in range(plan.world_size)]
        total = plan.world_size * plan.units_per_rank
        for block in workers.items(total, 0, block=_reading(run)):
            owners, units = world_items(block, plan.units_per_rank, plan.world_size, run)
            if plan.batch_size:
                for owner, unit in zip(owners.tolist(), units.tolist(), strict=True):
                    ids, padding = rank_plans[owner].records(plan.unit_positions([unit]), epoch)
                    batch = self._load(ids, padding, epoch)
                    yield batch if info is None else pack_tensors(batch)
            else:
                ids = np.empty(len(units), np.int64)
                padding = np.empty(len(units), bool)
                for owner in np.unique(owners).tolist():
                    mine = owners == owner
                    ids[mine], padding[mine] = rank_plans[owner].records(units[mine], epoch)
                yield from self._samples(ids, padding, epoch)
        self._epoch_guard.finished(epoch)

    def read_batch(self, ids: npt.ArrayLike, padding: npt.ArrayLike, epoch: int) -> dict[str, Any]:
        """The records ``ids`` as one batch, decoded and transformed as this dataset does in batch mode.

        Args:
            ids: record ids (places in the concatenated shards).
            padding: the batch's ``"_padding"`` flags.
            epoch: the epoch of the transform's random numbers (seeded from seed, epoch, ids[0]).
        """
        return self._load(np.asarray(ids, dtype=np.int64), np.asarray(padding, dtype=bool), epoch)

    def read_samples(
        self, ids: npt.ArrayLike, padding: npt.ArrayLike, epoch: int
    ) -> Iterator[dict[str, Any]]:
        """The records ``ids`` as samples, decoded and transformed as this dataset does in sample mode."""
        return self._samples(np.asarray(ids, dtype=np.int64), np.asarray(padding, dtype=bool), epoch)

    def _load(self, ids: np.ndarray[Any, Any], padding: np.ndarray[Any, Any], epoch: int) -> dict[str, Any]:
        batch = self._decoder.batch(ids, padding, self.plan.seed, epoch)
        return transformed(self._transform, batch, self.plan.seed, epoch)  # type: ignore[no-any-return]

    def _samples(
        self, ids: np.ndarray[Any, Any], padding: np.ndarray[Any, Any], epoch: int
    ) -> Iterator[dict[str, Any]]:
        for sample in self._decoder.samples(ids, padding, self.plan.seed, epoch):
            yield transformed(self._transform, sample, self.plan.seed, epoch)

    def state_dict(self, consumed: int | None = None, *, gather: bool = False) -> dict[str, Any]:
        """Where this rank is in the current epoch, to resume from with :meth:`load_state_dict`.

        Args:
            consumed: for a plain DataLoader with workers, whose progress the dataset in the main
                process cannot see: the batches (batch mode) taken from the loader since this
                epoch's iteration began (after any loaded place). Exact in batch mode with any
                number of workers, and in sample mode with at most one worker; with more, use
                torchdata's StatefulDataLoader.
            gather: all ranks call it together (a collective over the default process group)
                and each gets the same *global* state: what is left of the epoch, which resumes
                on any number of ranks (save it once, from rank 0).

        Without ``consumed``: in the main process after iterating in it (``num_workers=0``), the
        rank's exact place; inside a DataLoader worker (as torchdata's StatefulDataLoader calls
        it), that worker's place. A StatefulDataLoader's saved state can be loaded into this
        dataset too, to resume with another number of workers.
        """
        if self._dispatch.get() and self.plan.world_size > 1:
            raise ValueError(DISPATCHED_STATE)
        in_worker = get_worker_info() is not None
        live = self._live
        epoch = live.epoch if in_worker and live is not None else self._epoch.current()
        state = rank_state(
            self._plan_for(epoch), self._identity(), epoch, self._live, self._resume, consumed, in_worker
        )
        if not gather:
            return state
        if in_worker or not (dist.is_available() and dist.is_initialized()):
            raise ValueError("gather=True needs an initialized process group, in the main process")
        states: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(states, state)
        return combine_states(states, self.plan)

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Resumes from :meth:`state_dict`, from a torchdata StatefulDataLoader's ``state_dict()``,
        or from the states of all ranks of a job.

        Call it before iterating (before the DataLoader starts its workers). The epoch is set
        to the state's; :meth:`set_epoch` with the same epoch keeps the place, another epoch
        starts that epoch from the beginning.

        A rank's state resumes any rank of a job with the same world size: the ranks take their
        equal shares in step, so rank 0's place (what Lightning and Accelerate save) is every
        rank's place in its own share. To resume on another
        number of ranks, give every new rank the states of *all* old ranks (a list of their
        ``state_dict()`` or StatefulDataLoader states, in any order) or the global state of
        ``state_dict(gather=True)``: the rest of the epoch is split afresh over the new ranks,
        each the same number of batches (with ``drop_last=True`` fewer than one new global
        batch is left out of it; with False the last batches are padded), each record of the
        rest read exactly once; later epochs are the new world's normal epochs.

        Raises:
            ValueError: the state is from another dataset (files, record count), seed, shuffle,
                samples_per_epoch, batch size, drop_last or world size / rank, or is not a
                state of this class.
        """
        in_worker = get_worker_info() is not None
        resume = load_state(state, self.plan, self._identity(), in_worker)
        if not in_worker:
            self._epoch.restart_at(resume.epoch)
        self._resume = resume
        self._live = None

    def _identity(self) -> dict[str, Any]:
        plan = self.plan
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
