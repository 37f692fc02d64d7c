"""Which records a dataset's ``select=`` and ``subset=`` keep, as one
:class:`~torch_tfrecord.data.select.selection.Selection` of its files: a selection read or given,
narrowed by a subset (a fraction or count drawn once from a seed, ranges, record ids, a mask, or
another selection). :mod:`.selected_files` then reads them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...errors import SelectionError
from ...records.io import PathLike, StorageOptions
from ...records.shards.files import RecordFiles
from ...support.seeds import mix_seed
from ..order.permutation import permute
from .id_sets import IdSetParts, from_ids
from .selection import Selection, shard_prints

__all__ = ["Subset", "chosen_records"]

Subset = float | int | range | Sequence[range] | npt.ArrayLike | Selection | PathLike | None
"""What ``subset=`` takes: a fraction or a count of the records (drawn once from ``seed``), a
``range`` or list of ranges of record ids, record ids, a boolean mask of the records, a
:class:`~torch_tfrecord.data.select.selection.Selection` or a selection file's path."""

_SUBSET_KEY = 0x5E1EC7  # the subset's draw is its own permutation, not an epoch's
_DRAW = 1 << 20  # positions drawn at once


def chosen_records(
    files: RecordFiles,
    select: Selection | PathLike | None,
    subset: Subset,
    seed: int,
    storage_options: StorageOptions,
) -> Selection:
    """The records of ``files`` that ``select`` keeps (all when None), narrowed by ``subset``
    (at least one of them given).

    Raises:
        SelectionError: a selection made for other shards, or a subset out of range.
    """
    selection = None if select is None else _read(select, files, storage_options, "select=")
    if subset is not None:
        selection = _subset(files, subset, selection, seed, storage_options)
    assert selection is not None
    return selection


def _read(
    given: Selection | PathLike, files: RecordFiles, storage_options: StorageOptions, argument: str
) -> Selection:
    if isinstance(given, Selection):
        selection, name = given, f"the {argument} selection"
    elif isinstance(given, str | os.PathLike):
        selection, name = Selection.read(given, storage_options), repr(os.fspath(given))
    else:
        raise TypeError(
            f"{argument} takes a Selection or a selection file's path, not {type(given).__name__}"
        )
    selection.check(files, name)
    return selection


def _subset(
    files: RecordFiles, subset: Subset, within: Selection | None, seed: int, storage_options: StorageOptions
) -> Selection:
    """The records ``subset`` keeps of ``within`` (every record of ``files`` when None)."""
    size = files.num_records
    pool = len(within) if within is not None else size
    if isinstance(subset, bool):
        raise TypeError("subset= takes a fraction, a count, ranges, record ids or a selection; not a bool")
    if isinstance(subset, float):
        if not 0.0 < subset <= 1.0:
            raise SelectionError(f"subset={subset} must be a fraction in (0, 1]")
        count = round(subset * pool)
        if count == 0:
            raise SelectionError(f"subset={subset} of {pool:,} records keeps none of them")
        return _draw(files, within, count, seed, f"subset={subset}")
    if isinstance(subset, int | np.integer):
        if not 0 < int(subset) <= pool:
            raise SelectionError(f"subset={subset} must be a count of records in [1, {pool:,}]")
        return _draw(files, within, int(subset), seed, f"subset={subset}")
    if isinstance(subset, Selection | str | os.PathLike):
        chosen = _read(subset, files, storage_options, "subset=")
    elif isinstance(subset, range) or (
        isinstance(subset, Sequence) and subset and all(isinstance(r, range) for r in subset)
    ):
        ranges: list[range] = [subset] if isinstance(subset, range) else list(subset)  # type: ignore[arg-type]
        chosen = Selection.from_ranges(files, ranges)
    else:
        array = np.asarray(subset)
        if array.dtype == bool:
            if array.shape != (size,):
                raise SelectionError(f"a mask of the records has {size:,} values, not {array.shape}")
            array = np.flatnonzero(array)
        elif array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
            raise TypeError(
                "subset= takes a fraction, a count, a range or ranges, record ids (1-D ints), a mask "
                f"of the records, or a selection; not {type(subset).__name__} of {array.dtype}"
            )
        try:
            chosen = Selection(shard_prints(files), from_ids(array, size))
        except IndexError as error:
            raise SelectionError(f"subset=: {error}") from None
    return chosen if within is None else within.intersect(chosen)


def _draw(files: RecordFiles, within: Selection | None, count: int, seed: int, how: str) -> Selection:
    """``count`` records drawn at random from ``within`` (or all records): the first ``count``
    places of a permutation keyed by ``seed`` (the same on every rank, worker and epoch)."""
    size = files.num_records
    pool = len(within) if within is not None else size
    bits = np.zeros(-(-size // 8), dtype=np.uint8)
    key = mix_seed(seed, _SUBSET_KEY)
    for first in range(0, count, _DRAW):
        places = permute(np.arange(first, min(count, first + _DRAW), dtype=np.int64), pool, key)
        ids = places if within is None else within.ids.select(places)
        np.bitwise_or.at(bits, ids >> 3, (1 << (ids & 7)).astype(np.uint8))
    parts = IdSetParts(size)
    parts.add_bits(size, bits)
    where = how if within is None or not within.where else f"{within.where}, {how}"
    return Selection(shard_prints(files), parts.build(), where)
