"""``tt.pack``: token sequences packed into rows of exactly ``length`` tokens, split exactly over ranks.

Wiring only: :mod:`.grouping.sequences` reads the dataset's sequence lengths once, :mod:`.grouping.packing`
packs each epoch's sequences into rows (a pure function of the epoch's order and the lengths),
:mod:`.grouping.group_datasets` splits the rows over ranks and workers through the epoch driver, and
:mod:`.grouping.packed_rows` assembles the rows that a worker reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..records.io import PathLike
from .decoding import PADDING_KEY
from .epoch.driver import DEFAULT_PREFETCH, EpochDataset
from .grouping.group_datasets import GroupedDataset, Pieces
from .grouping.groups import Groups, Int64Array
from .grouping.packed_rows import assemble_rows, output_keys, sample_columns
from .grouping.packing import Method, PackedEpoch, PackOptions, plan_packing

__all__ = ["PackStats", "PackedDataset", "pack"]

Array = npt.NDArray[Any]


@dataclasses.dataclass(frozen=True)
class PackStats:
    """What an epoch's packing did with its sequences (all ranks together).

    Attributes:
        epoch: the epoch.
        sequences: sequences in the epoch.
        rows: rows they were packed into (before ``drop_last`` or padding).
        tokens: real tokens of each key in those rows.
        fill: real tokens / row tokens, per key.
        empty: sequences with no token (in no row).
        dropped_long: sequences longer than a row left out (``drop_long=True``).
        split: sequences in more than one piece (``split_long=True``, or cut by ``"concat"``).
        dropped_rows: rows that ``drop_last=True`` leaves out (fewer than one global batch).
        dropped_sequences: sequences with a piece in those rows.
        padding_rows: empty rows (marked ``"_padding"``) that even out the ranks (``drop_last=False``).
        skipped: damaged records skipped while reading the lengths (``on_error="skip"``; empty).
    """

    epoch: int
    sequences: int
    rows: int
    tokens: dict[str, int]
    fill: dict[str, float]
    empty: int
    dropped_long: int
    split: int
    dropped_rows: int
    dropped_sequences: int
    padding_rows: int
    skipped: int


@dataclasses.dataclass
class _Read:
    """Rows read in the loading thread, assembled in the loop's thread (after the dataset's
    transform, which runs there), once for all of them."""

    loaded: list[Any]
    pieces: Pieces
    padding: npt.NDArray[np.bool_]
    assembled: dict[str, Any] | None = None


@dataclasses.dataclass
class _Row:
    """Row ``index`` of a read (sample mode), or the whole read (batch mode: ``index`` None)."""

    read: _Read
    index: int | None


class PackedDataset(GroupedDataset):
    """Token sequences packed into rows of exactly ``length`` tokens, split exactly over ranks and workers.

    Each epoch, the sequences of the dataset's epoch (its records, in its order; a mix's places)
    are packed into rows: every sequence lands in exactly one row (its pieces in consecutive
    rows when cut) on exactly one rank, but those asked to be left out (``drop_long``, and
    with ``drop_last`` the sequences of the last rows, fewer than one global batch), all counted
    in :meth:`stats`. Every rank gets the same number of rows (``len()`` is exact); without
    ``drop_last`` the ranks are evened out with empty rows marked ``"_padding"``. The rows of an
    epoch are a pure function of the dataset's order and the sequences' lengths (read once, when
    the dataset is built), so they are the same with any number of workers, and a place in them
    (``state_dict``) resumes exactly, also on another number of ranks.

    A row (in the layout of seqio's and t5x's packed data), for each key: ``"<key>"`` (int64 tokens,
    ``pad_id`` past the end), ``"<key>_segment_ids"`` (int32: 0 for padding, 1, 2, ... for the
    sequences of the row in order), ``"<key>_positions"`` (int32: each token's place in its
    sequence's piece), and ``"_padding"``. With ``batch_size``, ``[B, length]`` tensors and
    ``"_padding"`` ``[B]``; without, one row per sample (for ``DataLoader(batch_size=...)``).

    Args:
        dataset: a :class:`~torch_tfrecord.TFRecordDataset` or ``tt.mix`` of them, made without
            ``batch_size``, whose ``keys`` are 1-D integer sequences (VarLen or
            FixedLenSequence int features; SequenceExample feature lists of single ints). Its
            transform may change the tokens but not their number.
        length: tokens per row, the same for every key or a mapping key -> length.
        keys: the keys packed together (a sequence's keys share its segment id); other features
            are not in the rows.
        method: ``"first_fit"``, ``"best_fit"`` (over ``buffer_size`` open rows, as grain's
            packers) or ``"concat"`` (concatenate and cut: no padding but at the epoch's end).
        buffer_size: rows open at once for first-fit and best-fit (grain's ``num_packing_bins``).
        split_long: cut a sequence longer than a row into pieces of at most a row instead of
            raising (first-fit and best-fit place its last piece like a sequence).
        drop_long: leave a sequence longer than a row out instead of raising (counted).
        pad_id: the token of padding.
        batch_size: rows per batch (``DataLoader(batch_size=None)``); None yields rows.
        drop_last: True leaves out the last rows, fewer than one global batch (their sequences
            counted); False (the default) pads the ranks with empty rows marked ``"_padding"``.
        rank, world_size: the split (default: the dataset's).
        prefetch, loader_batch_size, threads, process: as for :class:`~torch_tfrecord.TFRecordDataset`
            (the dataset's own ``threads`` are not used: the packing's make its batches).
        lengths_cache: a directory that keeps the lengths table (one small file per data and
            keys, written atomically): the first dataset built reads the records' lengths and
            saves them there, every later one (other ranks, later jobs) loads them. None: each
            dataset reads them itself, when it is built.

    Raises:
        SpecError, FeatureTypeError: a key that is not a 1-D integer sequence (naming the key,
            and the record when its values say so).
        FeatureShapeError: a sequence longer than a row, with neither ``split_long`` nor
            ``drop_long``, naming the key and the record.

    Example:
        >>> source = tt.TFRecordDataset("c4-train-*.tfrecord", spec={"targets": "int"})  # doctest: +SKIP
        >>> rows = tt.pack(source, length=2048, keys=["targets"], batch_size=8)  # doctest: +SKIP
        >>> next(iter(rows))["targets"].shape  # doctest: +SKIP
        torch.Size([8, 2048])
    """

    _FORMAT = "torch_tfrecord.PackedDataset/1"

    def __init__(
        self,
        dataset: EpochDataset,
        length: int | Mapping[str, int] = 2048,
        keys: Sequence[str] = ("inputs", "targets"),
        method: Method = "first_fit",
        *,
        buffer_size: int = 64,
        split_long: bool = False,
        drop_long: bool = False,
        pad_id: int = 0,
        batch_size: int | None = None,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        loader_batch_size: int | None = None,
        lengths_cache: PathLike | None = None,
        threads: int = 0,
        process: bool = False,
    ) -> None:
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        if isinstance(length, Mapping):
            if sorted(length) != sorted(keys):
                raise ValueError(f"length names keys {sorted(length)}, the packed keys are {sorted(keys)}")
            capacities = tuple(length[key] for key in keys)
        else:
            capacities = (length,) * len(keys)
        made = {name for key in keys for name in output_keys(key)[1:]}
        if made & set(keys) or PADDING_KEY in keys:
            raise ValueError(f"keys {list(keys)} clash with the keys a packed row adds")
        if isinstance(pad_id, bool) or not isinstance(pad_id, int):
            raise ValueError(f"{pad_id=} must be an int")
        self.options = PackOptions(capacities, method, buffer_size, split_long, drop_long)
        self.pad_id = pad_id
        super().__init__(
            dataset, keys, batch_size=batch_size, drop_last=drop_last, rank=rank, world_size=world_size,
            prefetch=prefetch, loader_batch_size=loader_batch_size, lengths_cache=lengths_cache,
            threads=threads, process=process,
        )  # fmt: skip

    def _check_sequences(self) -> None:
        if not (self.options.split_long or self.options.drop_long):
            self.sequences.check_long(
                self.options.capacities,
                "give split_long=True to cut it over rows, or drop_long=True to leave it out (counted)",
            )

    def _group(self, lengths: Int64Array) -> tuple[Groups, PackedEpoch]:
        packed = plan_packing(lengths, self.options)
        return packed.rows, packed

    def _options(self) -> dict[str, Any]:
        options = dataclasses.asdict(self.options)
        return {**options, "capacities": list(self.options.capacities), "keys": list(self.keys)}

    @property
    def length(self) -> dict[str, int]:
        """Tokens per row of each key."""
        return dict(zip(self.keys, self.options.capacities, strict=True))

    def load(self, ids: Int64Array, padding: npt.NDArray[np.bool_], epoch: int, batched: bool) -> list[Any]:
        """Rows ``ids`` of ``epoch`` (padding rows empty): assembled here when the dataset has no
        transform, else read here and assembled by :meth:`finish`."""
        real = np.flatnonzero(~padding)
        pieces = self._pieces(ids[real], epoch)
        pieces = dataclasses.replace(pieces, owner=real[pieces.owner])
        if not self.sequences.plain:
            read = _Read(self.sequences.load(pieces.ids, epoch), pieces, padding)
            return [_Row(read, None)] if batched else [_Row(read, i) for i in range(len(ids))]
        columns, stand_in = self.sequences.columns(pieces.ids, epoch)
        found = np.stack([columns[key][1] for key in self.keys], axis=1)
        expected = self.sequences.lengths(pieces.ids, epoch)
        self.sequences.check_read(np.where(stand_in[:, None], expected, found), pieces.ids, epoch)
        rows = self._assemble(columns, pieces, padding, stand_in)
        return [rows] if batched else _split_rows(rows, len(ids))

    def finish(self, loaded: Any, epoch: int) -> dict[str, Any]:
        """A row or batch: assembled now if :meth:`load` left it to the loop's thread."""
        if not isinstance(loaded, _Row):
            return loaded  # type: ignore[no-any-return]
        read = loaded.read
        if read.assembled is None:
            samples = [self.sequences.finish(item, epoch) for item in read.loaded]
            ids = read.pieces.ids
            columns = sample_columns(
                samples, self.keys, lambda at: self.sequences.describe(int(ids[at]), epoch)
            )
            # A damaged record's stand-in (on_error="skip") is marked padding: its pieces stay empty.
            stand_in = np.asarray([bool(sample.get(PADDING_KEY)) for sample in samples], dtype=bool)
            found = np.stack([columns[key][1] for key in self.keys], axis=1)
            expected = self.sequences.lengths(ids, epoch)
            self.sequences.check_read(np.where(stand_in[:, None], expected, found), ids, epoch)
            read.assembled = self._assemble(columns, read.pieces, read.padding, stand_in)
            read.loaded = []
        if loaded.index is None:
            return read.assembled
        return _row(read.assembled, loaded.index)

    def _assemble(
        self,
        columns: Mapping[str, Any],
        pieces: Pieces,
        padding: npt.NDArray[np.bool_],
        blank: npt.NDArray[np.bool_] | None,
    ) -> dict[str, Any]:
        rows = assemble_rows(
            columns, self.keys, self.options.capacities, pieces, len(padding), self.pad_id, blank
        )
        batch: dict[str, Any] = {key: torch.from_numpy(value) for key, value in rows.items()}
        batch[PADDING_KEY] = torch.from_numpy(padding.copy())
        return batch

    def pack_stats(self, epoch: int | None = None) -> PackStats:
        """What the packing of ``epoch`` (default: the current one) did with its sequences."""
        epoch = self.epoch if epoch is None else epoch
        packed: PackedEpoch = self.epoch_groups(epoch).details
        rows = packed.rows
        dropped_rows, dropped_sequences, padding_rows = self._left_out(epoch)
        tokens = rows.tokens()
        return PackStats(
            epoch=epoch,
            sequences=packed.sequences,
            rows=rows.count,
            tokens={key: int(tokens[k]) for k, key in enumerate(self.keys)},
            fill={
                key: float(tokens[k]) / max(1, rows.count * capacity)
                for k, (key, capacity) in enumerate(zip(self.keys, self.options.capacities, strict=True))
            },
            empty=packed.empty,
            dropped_long=packed.dropped_long,
            split=packed.split,
            dropped_rows=dropped_rows,
            dropped_sequences=dropped_sequences,
            padding_rows=padding_rows,
            skipped=self.sequences.skipped,
        )

    def __repr__(self) -> str:
        return (
            f"PackedDataset({self.plan.num_records} rows of {self.length} in epoch 0, {self.options.method}, "
            f"rank {self.plan.rank}/{self.plan.world_size}, batch_size={self.plan.batch_size})"
        )


def _row(batch: dict[str, Any], index: int) -> dict[str, Any]:
    """Row ``index`` of an assembled batch as a sample (``"_padding"`` a bool, as in samples of a dataset)."""
    row = {key: value[index] for key, value in batch.items()}
    row[PADDING_KEY] = bool(row[PADDING_KEY])
    return row


def _split_rows(batch: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The rows of an assembled batch, one sample each."""
    return [_row(batch, i) for i in range(count)]


pack = PackedDataset
"""``tt.pack(dataset, length=2048, keys=["targets"], batch_size=8)``: :class:`PackedDataset`."""
