"""Weighted mixing of datasets: ``tt.mix({"web": web, "books": books}, weights={...})``.

Wiring only: :mod:`.order.mixing` decides which source and item each place of an epoch takes,
:class:`~torch_tfrecord.data.order.plan.EpochPlan` splits the places over ranks and workers, the sources
read and decode their records, and :mod:`.epoch` drives the epochs as it does for every dataset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .dataset import TFRecordDataset
from .epoch.driver import DEFAULT_PREFETCH, EpochDataset
from .epoch.world import resolve_world
from .frameworks.detect import Wrapper
from .order.mixing import MixSchedule, locate, quotas
from .order.plan import EpochPlan
from .order.resume import Resume, wrapped_splits

__all__ = ["SOURCE_KEY", "MixedDataset", "mix"]

SOURCE_KEY = "_source"
FORMAT = "torch_tfrecord.MixedDataset/1"
Array = np.ndarray[Any, Any]


@dataclasses.dataclass
class _Loaded:
    """A mix's batch or sample as read, before the sources' transforms: its source(s) and pass(es)."""

    item: Any
    source: int = -1  # a sample's source
    passes: dict[int, int] = dataclasses.field(default_factory=dict)  # a batch's: source -> pass


class MixedDataset(EpochDataset):
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

    Samples carry ``"_source"``, the source's number in :attr:`names` (a number, not the name, so
    that loaders and the training frameworks that concatenate batches take it as a tensor). A
    batch (``batch_size``) is ``{"_source": int64 tensor of source numbers, one per place, name:
    that source's sub-batch of its records in the batch (with ``"_record_id"`` and
    ``"_padding"``)}`` for each source present.

    Args:
        sources: name -> :class:`TFRecordDataset` made without ``batch_size`` and
            ``samples_per_epoch`` (the mix has those).
        weights: name -> weight (any non-negative numbers); None weighs each source by its size.
        samples_per_epoch: places per epoch over all ranks.
        batch_size, drop_last, rank, world_size, prefetch, loader_batch_size: as for
            :class:`TFRecordDataset`.
        threads, transform_threads, process: as for :class:`TFRecordDataset` (the sources' own
            ``threads`` and ``process`` are not used: the mix's threads make its batches).
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
        prefetch: int = DEFAULT_PREFETCH,
        loader_batch_size: int | None = None,
        threads: int = 0,
        transform_threads: bool = False,
        process: bool = False,
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
        plan = EpochPlan(
            (total,), world_size=found_size, rank=found_rank, batch_size=batch_size, drop_last=drop_last,
            shuffle=False,
        )  # fmt: skip
        shuffled = any(source.plan.shuffle is not False for source in self.sources)
        super().__init__(
            plan, prefetch=prefetch, shuffled=shuffled, loader_batch_size=loader_batch_size, threads=threads,
            transform_threads=transform_threads, process=process,
        )  # fmt: skip
        self._schedule = MixSchedule(self.counts, (0,) * len(self.counts))
        self._saved: MixSchedule | None = None  # the schedule of a loaded epoch, if another
        self._loading: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # counts, offsets being loaded

    def _check_wrapper(self, wrapper: Wrapper | None) -> None:
        super()._check_wrapper(wrapper)
        batches = self.plan.batch_size is not None and self.plan.world_size > 1
        if batches and wrapper is not None and wrapper.kind == "dispatcher":
            raise ValueError(
                "under Accelerate's DataLoaderDispatcher, a mix in batch mode cannot be dispatched: "
                "its batches hold one sub-batch per source, which the dispatcher would cut across "
                "ranks; give the mix no batch_size and the DataLoader batch_size=B with "
                "collate_fn=tt.collate"
            )

    def _schedule_of(self, epoch: int) -> MixSchedule:
        resume = self._resume
        if resume is not None and resume.epoch == epoch and self._saved is not None:
            return self._saved
        return self._schedule

    def _base_plan(self, epoch: int) -> EpochPlan:
        """The split of ``epoch``'s places."""
        return dataclasses.replace(self.plan, shard_sizes=(self._schedule_of(epoch).epoch_size,))

    def guard_spec(self) -> Mapping[str, Any] | None:
        specs = [source.guard_spec() for source in self.sources]
        if any(spec is None for spec in specs):
            return None
        return {key: feature for spec in specs for key, feature in (spec or {}).items()}

    def load(self, ids: Array, padding: Array, epoch: int, batched: bool) -> list[_Loaded]:
        """The places ``ids`` of ``epoch``, read by their sources, not transformed."""
        schedule = self._schedule_of(epoch)
        offsets = np.asarray(schedule.offsets_at(epoch), dtype=np.int64)
        sources, records, passes = self._resolve(ids, schedule, offsets)
        if batched:
            batch: dict[str, Any] = {SOURCE_KEY: torch.from_numpy(sources)}
            loaded = _Loaded(batch)
            for source, where in self._parts(sources):
                pass_ = int(passes[where[0]])
                read = self.sources[source].load(records[where], padding[where], pass_, True)
                batch[self.names[source]] = read[0]
                loaded.passes[source] = pass_
            return [loaded]
        samples: list[_Loaded] = [_Loaded(None)] * len(sources)
        for source, where in self._parts(sources):
            pass_ = int(passes[where[0]])
            read = self.sources[source].load(records[where], padding[where], pass_, False)
            for place, sample in zip(where.tolist(), read, strict=True):
                samples[place] = _Loaded(sample, source, {source: pass_})
        return samples

    def finish(self, loaded: _Loaded, epoch: int) -> dict[str, Any]:
        """The sources' transforms (each seeded with its pass as the epoch), and the source's number."""
        if loaded.source < 0:
            batch = loaded.item
            for source, pass_ in loaded.passes.items():
                name = self.names[source]
                batch[name] = self.sources[source].finish(batch[name], pass_)
            return batch  # type: ignore[no-any-return]
        sample = self.sources[loaded.source].finish(loaded.item, loaded.passes[loaded.source])
        sample[SOURCE_KEY] = loaded.source
        return sample  # type: ignore[no-any-return]

    def _resolve(
        self, places: Array, schedule: MixSchedule, offsets: Array
    ) -> tuple[Array, Array, Array]:
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

    def _parts(self, sources: Array) -> Iterator[tuple[int, Array]]:
        """Each source present and the indices of its places."""
        for source in np.unique(sources).tolist():
            yield source, np.flatnonzero(sources == source)

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

    def _identity(self, plan: EpochPlan) -> dict[str, Any]:
        """The split's identity: the places of an epoch (the sources are checked apart)."""
        return self._split_identity(plan)

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
        return super().state_dict(consumed, gather=gather)

    def _wrap_state(self, split: dict[str, Any], epoch: int) -> dict[str, Any]:
        schedule = self._schedule_of(epoch)
        return {
            "format": FORMAT,
            "sources": self._source_identity(),
            "counts": list(schedule.counts),
            "offsets": list(schedule.offsets_at(epoch)),
            "split": split,
        }

    def _unwrap_state(
        self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> tuple[Any, EpochPlan, dict[str, Any]]:
        """The split's state(s) inside the mix's (or a loader's of the mix), its sources checked."""
        mixes, splits = wrapped_splits(state, FORMAT, "MixedDataset")
        identity = self._source_identity()
        for one in mixes:
            if one.get("sources") != identity:
                saved = one.get("sources") or {}
                differing = sorted(n for n in {*saved, *identity} if saved.get(n) != identity.get(n))
                raise ValueError(
                    f"cannot resume: the state's sources differ from this mix's in {differing} "
                    "(names, files, record counts, seed or shuffle)"
                )
            if (one["counts"], one["offsets"]) != (mixes[0]["counts"], mixes[0]["offsets"]):
                raise ValueError("the ranks' states are from different epochs or schedules")
        counts = tuple(int(c) for c in mixes[0]["counts"])
        self._loading = (counts, tuple(int(o) for o in mixes[0]["offsets"]))
        plan = dataclasses.replace(self.plan, shard_sizes=(sum(counts),), rest=None)
        return splits, plan, self._split_identity(plan)

    def _resumed(self, resume: Resume) -> None:
        """The saved epoch as it was planned, then the new proportions from where it ends."""
        counts, offsets = self._loading
        epoch = resume.epoch
        if counts == self.counts and offsets == tuple(epoch * c for c in counts):
            self._schedule, self._saved = MixSchedule(self.counts, (0,) * len(counts)), None
        else:
            self._saved = MixSchedule(counts, offsets, epoch)
            ends = tuple(o + c for o, c in zip(offsets, counts, strict=True))
            self._schedule = MixSchedule(self.counts, ends, epoch + 1)

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {c}" for n, c in zip(self.names, self.counts, strict=True))
        return (
            f"MixedDataset({{{parts}}} per epoch, rank {self.plan.rank}/{self.plan.world_size}, "
            f"batch_size={self.plan.batch_size})"
        )


mix = MixedDataset
"""``tt.mix({"web": web, "books": books}, {"web": 7, "books": 3}, batch_size=32)``: :class:`MixedDataset`."""
