"""The sequences that packing and length buckets group: which, in which order, their lengths, their reads.

A packed or bucketed dataset is built on a dataset of samples (it takes that dataset's whole
epoch and splits the groups it makes over the ranks itself). What it needs of that dataset is
decided once, when it is built, by the dataset's kind: :class:`RecordSequences` for a
:class:`~torch_tfrecord.data.dataset.TFRecordDataset` (a sequence is a record), :class:`MixSequences`
for a :class:`~torch_tfrecord.data.mix.MixedDataset` (a sequence is a place of its epoch, a
record of one of its sources). Both read the lengths table(s) when built (:mod:`.lengths`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import FeatureShapeError
from ...records.io import PathLike
from ..dataset import TFRecordDataset
from ..epoch.driver import EpochDataset
from ..mix import MixedDataset
from ..order.resume import PORTABLE_KEYS
from .groups import Int64Array
from .lengths import TokenColumn, check_lengths, keys_decoder, read_lengths, token_column
from .packing import long_sequences

__all__ = ["MixSequences", "RecordSequences", "Sequences", "sequences_of"]

Table = npt.NDArray[np.int32]


class Sequences:
    """The sequences of a dataset of samples, keyed by the ids of its epochs' plans.

    Attributes:
        dataset: the dataset.
        keys: the token keys.
        plain: its samples need nothing but decoding (no transform): :meth:`columns` reads
            the keys' tokens straight from the records.
        skipped: damaged records skipped while the lengths were read (``on_error="skip"``).
    """

    plain = False

    def __init__(self, dataset: EpochDataset, keys: Sequence[str]) -> None:
        if dataset.plan.batch_size is not None:
            raise ValueError(
                f"the dataset has batch_size={dataset.plan.batch_size}; give it none (packing and "
                "buckets make the batches)"
            )
        self.dataset = dataset
        self.keys = tuple(keys)
        self.skipped = 0

    def epoch_ids(self, epoch: int) -> Int64Array:
        """The ids of the dataset's whole epoch (all ranks), in order."""
        plan = self.dataset._base_plan(epoch)
        return plan.stream(np.arange(plan.epoch_size, dtype=np.int64) + epoch * plan.epoch_size)

    def lengths(self, ids: Int64Array, epoch: int) -> Int64Array:
        """Tokens of each key of the sequences ``ids`` of ``epoch`` (``[len(ids), keys]``)."""
        raise NotImplementedError

    def describe(self, id_: int, epoch: int) -> str:
        """The record behind an id, for error messages."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """What a saved state must match: the data, and the order of its epochs."""
        raise NotImplementedError

    def tables(self) -> list[tuple[Table, Callable[[int], str]]]:
        """Each lengths table, with what names the record of a row."""
        raise NotImplementedError

    @property
    def shuffled(self) -> bool:
        raise NotImplementedError

    def load(self, ids: Int64Array, epoch: int) -> list[Any]:
        """The samples ``ids`` of ``epoch``, loaded, not finished (the loading thread)."""
        return self.dataset.load(ids, np.zeros(len(ids), dtype=bool), epoch, False)

    def finish(self, loaded: Any, epoch: int) -> dict[str, Any]:
        """A loaded sample after the dataset's transform (the loop's thread)."""
        return self.dataset.finish(loaded, epoch)  # type: ignore[no-any-return]

    def columns(self, ids: Int64Array, epoch: int) -> tuple[dict[str, TokenColumn], npt.NDArray[np.bool_]]:
        """Each key's tokens of the records ``ids`` (plain datasets), and which were damaged."""
        raise NotImplementedError

    def check_long(self, capacities: tuple[int, ...], hint: str) -> None:
        """Raises for a sequence longer than a row in some key, naming the key and the record.

        Raises:
            FeatureShapeError: the first such sequence.
        """
        for table, describe in self.tables():
            long = np.flatnonzero(long_sequences(table, capacities))
            if len(long):
                row = table[int(long[0])]
                k = int(np.argmax(row > np.asarray(capacities)))
                raise FeatureShapeError(
                    f"key {self.keys[k]!r} of {describe(int(long[0]))} has {int(row[k])} tokens, more "
                    f"than a row's {capacities[k]}; {hint}",
                    key=self.keys[k],
                    record=describe(int(long[0])),
                )

    def check_read(self, found: Int64Array, ids: Int64Array, epoch: int) -> None:
        """Raises when sequences read have other lengths than planned (see :func:`check_lengths`)."""
        check_lengths(
            found, self.lengths(ids, epoch), self.keys, lambda at: self.describe(int(ids[at]), epoch)
        )


class RecordSequences(Sequences):
    """A :class:`TFRecordDataset`'s records as sequences: an id is a record id."""

    def __init__(self, dataset: TFRecordDataset, keys: Sequence[str], cache: PathLike | None = None) -> None:
        super().__init__(dataset, keys)
        self.dataset: TFRecordDataset = dataset
        self.table, self.skipped = read_lengths(dataset, self.keys, cache)
        self._decoder = keys_decoder(dataset, self.keys)
        self.plain = type(dataset).finish is TFRecordDataset.finish and dataset._transform is None

    def lengths(self, ids: Int64Array, epoch: int) -> Int64Array:
        return self.table[ids].astype(np.int64)

    def describe(self, id_: int, epoch: int) -> str:
        return self.dataset.files.describe(id_)

    def identity(self) -> dict[str, Any]:
        own = self.dataset._identity(self.dataset.plan)
        return {"kind": "records", **{key: own[key] for key in PORTABLE_KEYS}}

    def tables(self) -> list[tuple[Table, Callable[[int], str]]]:
        return [(self.table, self.dataset.files.describe)]

    @property
    def shuffled(self) -> bool:
        return self.dataset.plan.shuffle is not False

    def columns(self, ids: Int64Array, epoch: int) -> tuple[dict[str, TokenColumn], npt.NDArray[np.bool_]]:
        batch, read, stand_in = self._decoder.decode(ids, np.zeros(len(ids), dtype=bool))
        files = self.dataset.files
        columns = {
            key: token_column(batch, key, len(ids), lambda at: files.describe(int(read[at])))
            for key in self.keys
        }
        return columns, stand_in


class MixSequences(Sequences):
    """A :class:`MixedDataset`'s places as sequences: an id is a place of an epoch, which holds a
    record of one source (a source's lengths table is read once, whatever its share)."""

    def __init__(self, dataset: MixedDataset, keys: Sequence[str], cache: PathLike | None = None) -> None:
        super().__init__(dataset, keys)
        self.dataset: MixedDataset = dataset
        read = [read_lengths(source, self.keys, cache) for source in dataset.sources]
        self.source_tables = [table for table, _ in read]
        self.skipped = sum(skipped for _, skipped in read)

    def _resolve(self, places: Int64Array, epoch: int) -> tuple[Int64Array, Int64Array]:
        """Each place's source and record."""
        schedule = self.dataset._schedule_of(epoch)
        offsets = np.asarray(schedule.offsets_at(epoch), dtype=np.int64)
        sources, records, _ = self.dataset._resolve(places, schedule, offsets)
        return sources, records

    def lengths(self, ids: Int64Array, epoch: int) -> Int64Array:
        sources, records = self._resolve(ids, epoch)
        out = np.zeros((len(ids), len(self.keys)), dtype=np.int64)
        for source in np.unique(sources).tolist():
            where = sources == source
            out[where] = self.source_tables[source][records[where]]
        return out

    def describe(self, id_: int, epoch: int) -> str:
        sources, records = self._resolve(np.asarray([id_], dtype=np.int64), epoch)
        source = int(sources[0])
        record = self.dataset.sources[source].files.describe(int(records[0]))
        return f"{record} (source {self.dataset.names[source]!r})"

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "mix",
            "sources": self.dataset._source_identity(),
            "counts": list(self.dataset.counts),
        }

    def tables(self) -> list[tuple[Table, Callable[[int], str]]]:
        return [
            (table, source.files.describe)
            for table, source in zip(self.source_tables, self.dataset.sources, strict=True)
        ]

    @property
    def shuffled(self) -> bool:
        return any(source.plan.shuffle is not False for source in self.dataset.sources)


def sequences_of(dataset: Any, keys: Sequence[str], cache: PathLike | None = None) -> Sequences:
    """The sequences of ``dataset``, of the kind its class says (``cache``: where lengths tables
    are kept, see :func:`~torch_tfrecord.data.grouping.lengths.read_lengths`).

    Raises:
        TypeError: not a dataset whose sequences can be grouped.
        ValueError: a dataset that makes batches itself.
        SpecError, FeatureTypeError: a key that is not a 1-D integer sequence.
    """
    if isinstance(keys, str) or not keys:
        raise ValueError(
            f"keys={keys!r} must be a non-empty sequence of feature keys, e.g. ('inputs', 'targets')"
        )
    if len(set(keys)) != len(keys):
        raise ValueError(f"keys={list(keys)} names a key twice")
    if isinstance(dataset, TFRecordDataset):
        return RecordSequences(dataset, keys, cache)
    if isinstance(dataset, MixedDataset):
        return MixSequences(dataset, keys, cache)
    raise TypeError(
        f"packing and buckets take a TFRecordDataset or a tt.mix of them (without batch_size), "
        f"not a {type(dataset).__name__}"
    )
