"""Weighted mixing of datasets: ``tt.mix({"web": web, "books": books}, weights={...})``.

Wiring only: :mod:`_mixing` decides which source and item each place of an epoch takes,
:class:`~torch_tfrecord.data.order.EpochPlan` splits the places over ranks and workers, the sources
read and decode their records, :mod:`_resume` keeps the place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from .dataset import TFRecordDataset
from .loader import calling_fetcher, use_fast_convert
from .mixing import Schedule, locate, quotas
from .order import EpochPlan, WorkerSlice
from .packing import pack_tensors
from .resume import Live, Resume, combine_states, load_state, rank_state, resume_point
from .workers import end_with_parent
from .world import SharedEpoch, resolve_world

__all__ = ["SOURCE_KEY", "MixedDataset", "mix"]

SOURCE_KEY = "_source"
FORMAT = "torch_tfrecord.MixedDataset/1"
_SAMPLE_CHUNK = 64  # sample mode: places a worker reads at once


class MixedDataset(IterableDataset[dict[str, Any]]):
    """Several datasets mixed in fixed proportions, split exactly over DDP ranks and DataLoader workers.

    Each epoch has ``samples_per_epoch`` places (default: all sources' records together), of
    which source ``name`` gets its weight's share, exactly (within one). The places interleave
    the sources evenly (every stretch of the epoch holds them in about their proportions) and
    each source is read in its own order: a source's records run through its own passes, each
    a new permutation of its records by its own ``shuffle`` and ``seed``, from epoch to epoch;
    so a source smaller than its share is read again in a new order (each record once per pass
    across all ranks and workers), never padded, and a larger one goes on where it stopped in
    the next epoch. The order is a pure function of the seeds, epoch, sizes and place.

    Each source keeps its own spec, transform (seeded with the source's pass as the epoch),
    shuffle and seed; the mix has the batch size, ``drop_last`` and the ranks, as a
    :class:`TFRecordDataset` has them (every rank the same number of batches).

    Samples carry ``"_source"``, the source's name. A batch (``batch_size``) is
    ``{"_source": int64 tensor of source numbers (in :attr:`names`), one per place, name: that
    source's sub-batch of its records in the batch (with ``"_record_id"`` and ``"_padding"``)}``
    for each source present.

    Args:
        sources: name -> :class:`TFRecordDataset` made without ``batch_size`` and
            ``samples_per_epoch`` (the mix has those).
        weights: name -> weight (any non-negative numbers); None weighs each source by its size.
        samples_per_epoch: places per epoch over all ranks.
        batch_size, drop_last, rank, world_size: as for :class:`TFRecordDataset`.
    """

    def __init__(
        self,
        sources: Mapping[str, TFRecordDataset],
        weights: Mapping[str, float] | None = None,
        *,
        samples_per_epoch: int | None = None,
        batch_size: int | None = None,
        drop_last: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if not sources:
            raise ValueError("a mix needs at least one source")
        for name, source in sources.items():
            if not isinstance(source, TFRecordDataset):
                raise TypeError(f"source {name!r} is a {type(source).__name__}, not a TFRecordDataset")
            if source.plan.batch_size is not None or source.plan.samples_per_epoch is not None:
                raise ValueError(
                    f"source {name!r} has batch_size or samples_per_epoch; give them to the mix instead"
                )
        self.names = tuple(sources)
        self.sources = tuple(sources.values())
        if weights is None:
            weights = {name: float(source.num_records) for name, source in sources.items()}
        if set(weights) != set(self.names):
            raise ValueError(f"weights name {sorted(weights)}, the sources are {sorted(self.names)}")
        self.weights = tuple(float(weights[name]) for name in self.names)
        total = sum(s.num_records for s in self.sources) if samples_per_epoch is None else samples_per_epoch
        if total < 1:
            raise ValueError(f"samples_per_epoch={total} must be positive (and the sources not all empty)")
        self.counts = quotas(self.weights, total)
        for name, source, count in zip(self.names, self.sources, self.counts, strict=True):
            if count and not source.num_records:
                raise ValueError(f"source {name!r} has no records but a weight of {weights[name]}")
        found_rank, found_size = resolve_world(rank, world_size)
        self.plan = EpochPlan(
            (total,), world_size=found_size, rank=found_rank, batch_size=batch_size, drop_last=drop_last,
            shuffle=False,
        )  # fmt: skip
        self._schedule = Schedule(self.counts, (0,) * len(self.counts))
        self._saved: Schedule | None = None  # the schedule of a loaded epoch, if another
        self._epoch = SharedEpoch()
        self._resume: Resume | None = None
        self._live: Live | None = None

    @property
    def epoch(self) -> int:
        return self._epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (in the main process, before each epoch); reaches persistent workers."""
        self._epoch.set(epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def __len__(self) -> int:
        """Batches (batch mode) or samples this rank gets per epoch (in the current one, if resumed)."""
        return self._setup(self._epoch.get())[0].units_per_rank

    def _setup(self, epoch: int) -> tuple[EpochPlan, Schedule]:
        """The plan (over the epoch's places) and the schedule of ``epoch``."""
        resume = self._resume if self._resume is not None and self._resume.epoch == epoch else None
        schedule = self._saved if resume is not None and self._saved is not None else self._schedule
        plan = dataclasses.replace(
            self.plan, shard_sizes=(schedule.epoch_size,), rest=None if resume is None else resume.rest
        )
        return plan, schedule

    def __iter__(self) -> Iterator[dict[str, Any]]:
        end_with_parent()
        use_fast_convert(calling_fetcher())  # as TFRecordDataset (see _loader)
        epoch = self._epoch.get()
        info = get_worker_info()
        plan, schedule = self._setup(epoch)
        offsets = np.asarray(schedule.offsets_at(epoch), dtype=np.int64)
        chunk = 1 if plan.batch_size else _SAMPLE_CHUNK
        workers = WorkerSlice(info.num_workers, info.id, chunk) if info else WorkerSlice(1, 0, chunk)
        progress, skip = resume_point(self._resume, epoch, workers)
        live = self._live = Live(epoch, progress, workers, skip)
        unit = plan.unit
        # Batch mode: 16 batches at once (numpy calls cost per call, and locating places per source
        # is a binary search of some 30 steps).
        for block in workers.items(
            progress.remaining(plan.units_per_rank), skip, block=16 if plan.batch_size else chunk
        ):
            places, padding = plan.records(plan.unit_positions(progress.units(block)), epoch)
            sources, ids, passes = self._resolve(places, schedule, offsets)
            if plan.batch_size:
                for first in range(0, len(places), unit):
                    part = slice(first, first + unit)
                    batch = self._batch(sources[part], ids[part], padding[part], passes[part])
                    live.yielded += 1
                    yield pack_tensors(batch) if info is not None else batch
            else:
                for sample in self._samples(sources, ids, padding, passes):
                    live.yielded += 1
                    yield sample
        if info is None and self._resume is not None and self._resume.epoch == epoch:
            self._resume = None

    def _resolve(
        self, places: np.ndarray[Any, Any], schedule: Schedule, offsets: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Each place's source, the record id it reads there, and that source's pass."""
        sources, items = locate(places, schedule.counts)
        stream = offsets[sources] + items
        ids, passes = np.empty_like(stream), np.empty_like(stream)
        for source in np.unique(sources).tolist():
            where = sources == source
            dataset = self.sources[source]
            ids[where] = dataset.plan.stream(stream[where])
            passes[where] = stream[where] // dataset.num_records
        return sources, ids, passes

    def _parts(self, sources: np.ndarray[Any, Any]) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
        """Each source present and the indices of its places."""
        for source in np.unique(sources).tolist():
            yield source, np.flatnonzero(sources == source)

    def _batch(
        self, sources: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], padding: np.ndarray[Any, Any],
        passes: np.ndarray[Any, Any],
    ) -> dict[str, Any]:  # fmt: skip
        batch: dict[str, Any] = {SOURCE_KEY: torch.from_numpy(sources)}
        for source, where in self._parts(sources):
            batch[self.names[source]] = self.sources[source].read_batch(
                ids[where], padding[where], int(passes[where[0]])
            )
        return batch

    def _samples(
        self, sources: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], padding: np.ndarray[Any, Any],
        passes: np.ndarray[Any, Any],
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        samples: list[dict[str, Any]] = [{}] * len(sources)
        for source, where in self._parts(sources):
            name = self.names[source]
            read = self.sources[source].read_samples(ids[where], padding[where], int(passes[where[0]]))
            for place, sample in zip(where.tolist(), read, strict=True):
                sample[SOURCE_KEY] = name
                samples[place] = sample
        yield from samples

    def _source_identity(self) -> dict[str, Any]:
        return {
            name: {
                "num_records": source.num_records,
                "seed": source.plan.seed,
                "shuffle": source.plan.shuffle,
                "fingerprint": source.files.fingerprint,
            }
            for name, source in zip(self.names, self.sources, strict=True)
        }

    @staticmethod
    def _split_identity(plan: EpochPlan) -> dict[str, Any]:
        return {
            "num_records": plan.num_records,
            "seed": 0,
            "shuffle": False,
            "world_size": plan.world_size,
            "rank": plan.rank,
            "batch_size": plan.batch_size,
            "drop_last": plan.drop_last,
            "samples_per_epoch": None,
            "fingerprint": None,
        }

    def state_dict(self, consumed: int | None = None, *, gather: bool = False) -> dict[str, Any]:
        """Where this rank is in the current epoch; as :meth:`TFRecordDataset.state_dict`.

        The state also holds where each source's stream stands, so it resumes with other
        weights or ``samples_per_epoch`` (the saved epoch ends as it was planned; the new
        proportions start with the next epoch, each source going on where it stopped).
        """
        epoch = self._epoch.get()
        in_worker = get_worker_info() is not None
        plan, schedule = self._setup(epoch)
        split = rank_state(
            plan, self._split_identity(plan), epoch, self._live, self._resume, consumed, in_worker
        )
        if gather:
            if in_worker or not (dist.is_available() and dist.is_initialized()):
                raise ValueError("gather=True needs an initialized process group, in the main process")
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, split)
            split = combine_states(states, plan)
        return {
            "format": FORMAT,
            "sources": self._source_identity(),
            "counts": list(schedule.counts),
            "offsets": list(schedule.offsets_at(epoch)),
            "split": split,
        }

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Resumes from :meth:`state_dict`, or from the states of all ranks (a list) on another world size.

        Raises:
            ValueError: the state is not a mix's, or its sources differ from this mix's.
        """
        states = [state] if isinstance(state, Mapping) else list(state)
        if not states:
            raise ValueError("no states to load")
        identity = self._source_identity()
        for one in states:
            if not isinstance(one, Mapping) or one.get("format") != FORMAT:
                raise ValueError(f"not a MixedDataset state (expected format {FORMAT!r})")
            if one.get("sources") != identity:
                saved = one.get("sources") or {}
                differing = sorted(n for n in {*saved, *identity} if saved.get(n) != identity.get(n))
                raise ValueError(
                    f"cannot resume: the state's sources differ from this mix's in {differing} "
                    "(names, files, record counts, seed or shuffle)"
                )
            if (one["counts"], one["offsets"]) != (states[0]["counts"], states[0]["offsets"]):
                raise ValueError("the ranks' states are from different epochs or schedules")
        counts = tuple(int(c) for c in states[0]["counts"])
        offsets = tuple(int(o) for o in states[0]["offsets"])
        plan = dataclasses.replace(self.plan, shard_sizes=(sum(counts),), rest=None)
        split: Any = states[0]["split"] if isinstance(state, Mapping) else [one["split"] for one in states]
        in_worker = get_worker_info() is not None
        resume = load_state(split, plan, self._split_identity(plan), in_worker)
        epoch = resume.epoch
        if counts == self.counts and offsets == tuple(epoch * c for c in counts):
            self._schedule, self._saved = Schedule(self.counts, (0,) * len(counts)), None
        else:  # the saved epoch as it was planned, then the new proportions from where it ends
            self._saved = Schedule(counts, offsets, epoch)
            ends = tuple(o + c for o, c in zip(offsets, counts, strict=True))
            self._schedule = Schedule(self.counts, ends, epoch + 1)
        if not in_worker:
            self._epoch.set(epoch)
        self._resume = resume
        self._live = None

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {c}" for n, c in zip(self.names, self.counts, strict=True))
        return (
            f"MixedDataset({{{parts}}} per epoch, rank {self.plan.rank}/{self.plan.world_size}, "
            f"batch_size={self.plan.batch_size})"
        )


mix = MixedDataset
"""``tt.mix({"web": web, "books": books}, {"web": 7, "books": 3}, batch_size=32)``: :class:`MixedDataset`."""
