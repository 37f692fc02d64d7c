"""Packing token sequences into rows of a fixed length: a pure function of the lengths in an epoch's order.

Three methods, as grain and seqio pack:

- ``"first_fit"``: up to ``buffer_size`` rows are open, in the order they opened; a sequence
  goes into the first open row where every key fits, else into a new row (the oldest open row
  closes first when ``buffer_size`` are open). A row closes as soon as a key is full, the last
  open ones at the end of the epoch.
- ``"best_fit"``: the same, into the fitting row that holds the most tokens.
- ``"concat"``: sequences fill one row after another, a sequence cut where the row ends and
  going on in the next (concatenate and cut, the pre-training way).

A sequence longer than a row (in any key) is an error, left out (``drop_long``) or cut into
pieces of at most a row (``split_long``: first-fit and best-fit place the last piece like a
sequence). Empty sequences (no token in any key) take no place. The rows of an epoch depend on
nothing but the lengths in order and the options, so any process computes the same rows, and a
place in them is just a row number: the "buffer" of a packer is never state to save.

The loops run in the compiled extension when it is built, else in numpy (the same rows: tests
compare both).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from ...support.extension import compiled as _native
from .groups import Groups, Int64Array

__all__ = ["Method", "PackOptions", "PackedEpoch", "long_sequences", "pack_items", "plan_packing"]

Method = Literal["first_fit", "best_fit", "concat"]
_METHOD_CODE = {"first_fit": 0, "best_fit": 1, "concat": 2}


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return int(value)


@dataclasses.dataclass(frozen=True)
class PackOptions:
    """How to pack: the row length of each key, the method, its window, and sequences longer than a row.

    Args:
        capacities: tokens per row of each key (the packed keys, in order).
        method: ``"first_fit"``, ``"best_fit"`` or ``"concat"``.
        buffer_size: rows open at once (first-fit and best-fit), as grain's ``num_packing_bins``.
        split_long: cut a sequence longer than a row into pieces of at most a row.
        drop_long: leave a sequence longer than a row out (counted).
    """

    capacities: tuple[int, ...]
    method: Method = "first_fit"
    buffer_size: int = 64
    split_long: bool = False
    drop_long: bool = False

    def __post_init__(self) -> None:
        if not self.capacities:
            raise ValueError("packing needs at least one key")
        object.__setattr__(self, "capacities", tuple(_positive_int(c, "length") for c in self.capacities))
        if self.method not in get_args(Method):
            raise ValueError(f"method={self.method!r} must be one of {list(get_args(Method))}")
        object.__setattr__(self, "buffer_size", _positive_int(self.buffer_size, "buffer_size"))
        if self.split_long and self.drop_long:
            raise ValueError("split_long=True and drop_long=True: a long sequence is either cut or left out")


@dataclasses.dataclass(frozen=True, eq=False)
class PackedEpoch:
    """An epoch's rows, and what became of its sequences.

    Attributes:
        rows: the rows (:class:`~torch_tfrecord.data.grouping.groups.Groups`), in the order they are read.
        sequences: sequences in the epoch's order (all of them).
        empty: sequences with no token in any key (in no row).
        dropped_long: sequences longer than a row left out (``drop_long``).
        split: sequences in more than one piece (``split_long``, or cut by ``"concat"``).
    """

    rows: Groups
    sequences: int
    empty: int
    dropped_long: int
    split: int


def long_sequences(lengths: npt.ArrayLike, capacities: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    """Which sequences (rows of ``lengths``: one column per key) are longer than a row in some key."""
    table = np.asarray(lengths, dtype=np.int64).reshape(-1, len(capacities))
    return np.asarray((table > np.asarray(capacities, dtype=np.int64)).any(axis=1))


def plan_packing(lengths: npt.ArrayLike, options: PackOptions, native: bool = True) -> PackedEpoch:
    """The rows of an epoch whose sequences, in order, have ``lengths`` (one column per key).

    Raises:
        ValueError: a sequence longer than a row with neither ``split_long`` nor ``drop_long``
            (the datasets check their sequences before, naming the record).
    """
    table = np.asarray(lengths, dtype=np.int64).reshape(-1, len(options.capacities))
    capacities = np.asarray(options.capacities, dtype=np.int64)
    empty = ~table.any(axis=1)
    long = long_sequences(table, options.capacities)
    if long.any() and not (options.split_long or options.drop_long):
        first = int(np.flatnonzero(long)[0])
        raise ValueError(
            f"sequence {first} has {table[first].tolist()} tokens, more than a row's "
            f"{list(options.capacities)}"
        )
    keep = ~empty & ~(long & options.drop_long)
    sequences = np.flatnonzero(keep).astype(np.int64)
    kept = table[sequences]
    splits = long[sequences] & (options.method != "concat")
    pieces = np.ones(len(sequences), dtype=np.int64)
    if splits.any():  # first-fit / best-fit place the pieces of a long sequence one by one
        pieces[splits] = (-(-kept[splits] // capacities)).max(axis=1)
    owner = np.repeat(np.arange(len(sequences), dtype=np.int64), pieces)
    offset = (np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces))[:, None]
    items = kept if options.method == "concat" else np.clip(kept[owner] - offset * capacities, 0, capacities)
    packed = pack_items(items, options.capacities, options.method, options.buffer_size, native)
    item_starts = offset[packed.sequences] * capacities
    starts = np.minimum(packed.starts + item_starts, kept[owner[packed.sequences]])
    stops = np.minimum(packed.stops + item_starts, kept[owner[packed.sequences]])
    rows = Groups(packed.offsets, sequences[owner[packed.sequences]], starts, stops)
    in_pieces = np.bincount(owner[packed.sequences], minlength=len(sequences)) > 1
    return PackedEpoch(
        rows,
        sequences=len(table),
        empty=int(empty.sum()),
        dropped_long=int((long & ~empty).sum()) if options.drop_long else 0,
        split=int(in_pieces.sum()),
    )


def pack_items(
    lengths: npt.ArrayLike, capacities: tuple[int, ...], method: Method, buffer_size: int, native: bool = True
) -> Groups:
    """Rows of items (none empty; each within a row, but with ``"concat"``), in their order:
    pieces name the items.

    ``native=False`` runs the numpy version even when the extension is built (tests compare).
    """
    table = np.ascontiguousarray(np.asarray(lengths, dtype=np.int64).reshape(-1, len(capacities)))
    caps = np.asarray(capacities, dtype=np.int64)
    if table.size and ((method != "concat" and (table > caps).any()) or (table < 0).any()):
        raise ValueError(f"every item must fit a row of {list(capacities)} tokens")
    if native and _native is not None and hasattr(_native, "pack_rows"):
        m, k = table.shape
        rows = m if method != "concat" else int(1 + (table.sum(axis=0) // caps).sum())
        pieces = m + (rows if method == "concat" else 0)
        offsets = np.zeros(rows + 1, dtype=np.int64)
        items = np.zeros(pieces, dtype=np.int64)
        starts, stops = np.zeros((pieces, k), dtype=np.int64), np.zeros((pieces, k), dtype=np.int64)
        count, placed = _native.pack_rows(
            table, caps, _METHOD_CODE[method], buffer_size, offsets, items, starts, stops
        )
        return Groups(
            offsets[: count + 1].copy(), items[:placed].copy(), starts[:placed].copy(), stops[:placed].copy()
        )
    if method == "concat":
        return _concat(table, caps)
    return _fit(table, caps, method == "best_fit", buffer_size)


def _groups(rows: list[list[tuple[int, Int64Array, Int64Array]]], k: int) -> Groups:
    """Rows of (item, starts, stops) pieces as arrays."""
    pieces = [piece for row in rows for piece in row]
    offsets = np.cumsum([0, *(len(row) for row in rows)], dtype=np.int64)
    items = np.asarray([item for item, _, _ in pieces], dtype=np.int64)
    starts = np.asarray([start for _, start, _ in pieces], dtype=np.int64).reshape(-1, k)
    stops = np.asarray([stop for _, _, stop in pieces], dtype=np.int64).reshape(-1, k)
    return Groups(offsets, items, starts, stops)


def _fit(table: Int64Array, caps: Int64Array, best: bool, window: int) -> Groups:
    """First-fit or best-fit over a window of open rows (the extension's ``pack_fit``, in numpy)."""
    k = len(caps)
    used = np.zeros((window, k), dtype=np.int64)
    members: list[list[int]] = [[] for _ in range(window)]
    open_slots: list[int] = []  # in the order they opened
    spare = list(range(window - 1, -1, -1))
    rows: list[list[tuple[int, Int64Array, Int64Array]]] = []
    zero = np.zeros(k, dtype=np.int64)

    def close(at: int) -> None:
        slot = open_slots.pop(at)
        rows.append([(item, zero, table[item]) for item in members[slot]])
        members[slot] = []
        used[slot] = 0
        spare.append(slot)

    for item, need in enumerate(table):
        placed = -1
        if open_slots:
            slots = np.asarray(open_slots)
            fits = (used[slots] + need <= caps).all(axis=1)
            if fits.any():
                score = np.where(fits, used[slots].sum(axis=1), -1)
                placed = int(np.argmax(score)) if best else int(np.argmax(fits))
        if placed < 0:
            if len(open_slots) == window:
                close(0)
            open_slots.append(spare.pop())
            placed = len(open_slots) - 1
        slot = open_slots[placed]
        used[slot] += need
        members[slot].append(item)
        if (used[slot] >= caps).any():
            close(placed)
    while open_slots:
        close(0)
    return _groups(rows, k)


def _concat(table: Int64Array, caps: Int64Array) -> Groups:
    """Concatenate and cut (the extension's ``pack_concat``, in numpy)."""
    k = len(caps)
    used = np.zeros(k, dtype=np.int64)
    rows: list[list[tuple[int, Int64Array, Int64Array]]] = []
    current: list[tuple[int, Int64Array, Int64Array]] = []
    for item, length in enumerate(table):
        start, rest = np.zeros(k, dtype=np.int64), length.copy()
        while True:
            take = np.minimum(rest, caps - used)
            current.append((item, start, start + take))
            used += take
            start, rest = start + take, rest - take
            if (used >= caps).any():
                rows.append(current)
                current, used = [], np.zeros(k, dtype=np.int64)
            if not rest.any():
                break
    if current:
        rows.append(current)
    return _groups(rows, k)
