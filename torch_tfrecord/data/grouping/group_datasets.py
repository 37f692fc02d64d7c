"""Datasets whose units are groups of another dataset's sequences (packed rows, length buckets).

A :class:`GroupedDataset` takes a dataset of samples (:mod:`.sequences`), computes each epoch's
groups from its order and lengths (a pure function, cached per epoch), and is an
:class:`~torch_tfrecord.data.epoch.driver.EpochDataset` whose ids are the epoch's group numbers: the
driver splits the groups over ranks and workers, pads the ranks to equal counts, and saves and
loads the place in them, also on another world size (the groups of an epoch are the same in
every process, so a place is a group number). Its state wraps the split's with what it must
match: the data and the options of the grouping.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ...records.io import PathLike
from ..epoch.driver import EpochDataset
from ..epoch.world import resolve_world
from ..order.plan import EpochPlan
from ..order.resume import PORTABLE_KEYS, wrapped_splits
from .groups import Groups, Int64Array
from .sequences import Sequences, sequences_of

__all__ = ["EpochGroups", "GroupedDataset"]

_CACHED_EPOCHS = 2  # the current epoch and the one before (a loader may still be finishing it)


@dataclasses.dataclass(frozen=True, eq=False)
class EpochGroups:
    """An epoch's groups: the ids of its sequences in order, and the groups of their positions."""

    ids: Int64Array
    groups: Groups
    details: Any = None  # what the grouping adds (a packing's counts)


@dataclasses.dataclass(frozen=True, eq=False)
class Pieces:
    """The pieces of some groups, ready to read: each piece's group (index into the groups
    asked), the sequences to read (``ids``, each once), the index in ``ids`` of each piece's
    sequence, and its starts and stops."""

    owner: Int64Array
    ids: Int64Array
    sequence: Int64Array
    starts: Int64Array
    stops: Int64Array


class GroupedDataset(EpochDataset):
    """Groups of a dataset's sequences, split exactly over DDP ranks and DataLoader workers.

    Subclasses give :meth:`_group` (an epoch's groups from its lengths), :meth:`_options` (what
    a saved state must match besides the data) and the reader (:meth:`load`, :meth:`finish`).

    Args:
        dataset: a dataset of samples (:func:`~torch_tfrecord.data.grouping.sequences.sequences_of`).
        keys: the token keys.
        batch_size: groups per unit (None: one group per item, sample mode).
        drop_last, rank, world_size, prefetch, loader_batch_size, threads, process: as for
            :class:`~torch_tfrecord.data.dataset.TFRecordDataset`; the rank and world size are
            the dataset's when neither is given.
        lengths_cache: a directory that keeps the sequences' lengths tables (see
            :func:`~torch_tfrecord.data.grouping.lengths.read_lengths`), or None.
    """

    _FORMAT: ClassVar[str]

    def __init__(
        self,
        dataset: EpochDataset,
        keys: Sequence[str],
        *,
        batch_size: int | None,
        drop_last: bool,
        rank: int | None,
        world_size: int | None,
        prefetch: int,
        loader_batch_size: int | None,
        lengths_cache: PathLike | None,
        threads: int = 0,
        process: bool = False,
    ) -> None:
        self.sequences: Sequences = sequences_of(dataset, keys, lengths_cache)
        self.keys = self.sequences.keys
        self._epochs: dict[int, EpochGroups] = {}
        self._warned_length = False
        if rank is None and world_size is None:
            rank, world_size = dataset.plan.rank, dataset.plan.world_size
        found_rank, found_size = resolve_world(rank, world_size)
        self._check_sequences()
        first = self.epoch_groups(0)
        plan = EpochPlan(
            (first.groups.count,), world_size=found_size, rank=found_rank, batch_size=batch_size,
            drop_last=drop_last, shuffle=False,
        )  # fmt: skip
        super().__init__(
            plan, prefetch=prefetch, shuffled=self.sequences.shuffled, loader_batch_size=loader_batch_size,
            threads=threads, process=process,
        )  # fmt: skip

    @property
    def dataset(self) -> EpochDataset:
        """The dataset whose sequences are grouped."""
        return self.sequences.dataset

    # -- what a subclass gives -------------------------------------------------------------

    def _check_sequences(self) -> None:
        """Raises for sequences the grouping cannot take (before the first epoch is grouped)."""

    def _group(self, lengths: Int64Array) -> tuple[Groups, Any]:
        """The groups of an epoch whose sequences, in order, have ``lengths``, and any details."""
        raise NotImplementedError

    def _options(self) -> dict[str, Any]:
        """The grouping's options, as plain values (lists, not tuples: a state may go through JSON)."""
        raise NotImplementedError

    # -- the groups ------------------------------------------------------------------------

    def epoch_groups(self, epoch: int) -> EpochGroups:
        """The groups of ``epoch`` (computed once per process, the last two epochs kept)."""
        found = self._epochs.get(epoch)
        if found is None:
            ids = self.sequences.epoch_ids(epoch)
            groups, details = self._group(self.sequences.lengths(ids, epoch))
            found = EpochGroups(ids, groups, details)
            while len(self._epochs) >= _CACHED_EPOCHS:
                self._epochs.pop(min(self._epochs))
            self._epochs[epoch] = found
        return found

    def _base_plan(self, epoch: int) -> EpochPlan:
        """The split of ``epoch``'s groups."""
        plan = dataclasses.replace(self.plan, shard_sizes=(self.epoch_groups(epoch).groups.count,))
        if plan.units_per_rank != self.plan.units_per_rank and not self._warned_length:
            self._warned_length = True
            warnings.warn(
                f"epoch {epoch} gives each rank {plan.units_per_rank} items, epoch 0 gave "
                f"{self.plan.units_per_rank} (the groups depend on the order): len() says each "
                "epoch's own, but a framework that reads it once for every epoch (transformers.Trainer, "
                "Lightning) would end an epoch early or cut its last steps; see the language-model guide",
                UserWarning,
                stacklevel=2,
            )
        return plan

    def _pieces(self, groups: Int64Array, epoch: int) -> Pieces:
        """The pieces of ``groups`` of ``epoch``, each sequence to read named once."""
        found = self.epoch_groups(epoch)
        owner, positions, starts, stops = found.groups.pieces(groups)
        ids, sequence = np.unique(found.ids[positions], return_inverse=True)
        return Pieces(owner, ids, sequence.reshape(-1).astype(np.int64), starts, stops)

    def _left_out(self, epoch: int) -> tuple[int, int, int]:
        """Groups of ``epoch`` that ``drop_last`` leaves out, the sequences with a piece in them,
        and the padding groups that even out the ranks."""
        groups = self.epoch_groups(epoch).groups
        plan = self._base_plan(epoch)
        kept = min(groups.count, plan.world_size * plan.samples_per_rank)
        dropped = np.unique(groups.pieces(np.arange(kept, groups.count))[1])
        return groups.count - kept, len(dropped), plan.padding

    # -- saved states ----------------------------------------------------------------------

    def _identity(self, plan: EpochPlan) -> dict[str, Any]:
        """The split's identity: the groups of an epoch (the data are checked apart)."""
        identity: dict[str, Any] = dict.fromkeys(PORTABLE_KEYS)
        identity.update(
            num_records=plan.num_records, seed=0, shuffle=False, world_size=plan.world_size, rank=plan.rank,
            batch_size=plan.batch_size, drop_last=plan.drop_last,
        )  # fmt: skip
        return identity

    def _wrap_state(self, split: dict[str, Any], epoch: int) -> dict[str, Any]:
        return {
            "format": self._FORMAT,
            "data": self.sequences.identity(),
            "options": self._options(),
            "epoch": epoch,
            "groups": self.epoch_groups(epoch).groups.count,
            "split": split,
        }

    def _unwrap_state(
        self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> tuple[Any, EpochPlan, dict[str, Any]]:
        """The split's state(s) inside this dataset's (or a loader's of it), checked against it."""
        wrappers, splits = wrapped_splits(state, self._FORMAT, type(self).__name__)
        expected = {"data": self.sequences.identity(), "options": self._options()}
        for one in wrappers:
            for part, mine in expected.items():
                if one.get(part) != mine:
                    saved = one.get(part) or {}
                    differing = sorted(k for k in {*saved, *mine} if saved.get(k) != mine.get(k))
                    raise ValueError(
                        f"cannot resume: the state's {part} differ from this dataset's in {differing}"
                    )
            if one.get("epoch") != wrappers[0].get("epoch"):
                raise ValueError("the ranks' states are from different epochs")
        epoch = int(wrappers[0]["epoch"])
        count = self.epoch_groups(epoch).groups.count
        if count != wrappers[0].get("groups"):
            raise ValueError(
                f"cannot resume: epoch {epoch} has {count} groups here and had {wrappers[0].get('groups')} "
                "when the state was saved (the sequences' lengths differ)"
            )
        plan = dataclasses.replace(self.plan, shard_sizes=(count,), rest=None)
        return splits, plan, self._identity(plan)
