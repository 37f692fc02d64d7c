"""``tt.select``: the records of some shards that a filter or a predicate passes, scanned once and
kept as a selection file that a dataset then reads (``select=``).

A filter is written in the filter language (:mod:`torch_tfrecord.codec.query`), so the viewer's
filter page, the command line (``tfrecord-index select``) and Python select the same records; its
clauses are tested on decoded columns (:mod:`torch_tfrecord.data.select.conditions`: only their features
decoded, combined by its ``and``, ``or`` and ``not``), and a filter with plain words as the viewer
searches it (every feature read). The scan itself is
:mod:`.scan`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ...codec.inspect import describe_record
from ...codec.query import Query, parse_query
from ...errors import SelectionError
from ...records.io import PathLike, StorageOptions, is_url, local_path
from ...records.shards.files import RecordFiles
from ...records.shards.index import IndexArg
from .scan import RecordTest, ScanProgress, scan_selection, scan_shards
from .selection import Selection

if TYPE_CHECKING:
    from ...codec.decode import SpecArg

__all__ = ["QueryTest", "select", "select_as_shown"]


class QueryTest:
    """The viewer's filter as it matches a record on its page (for filters with plain words: they
    look through every key and text value, so every feature is read)."""

    def __init__(self, query: Query) -> None:
        self.query = query

    def __call__(
        self, records: Sequence[bytes], locations: Sequence[str] | None = None
    ) -> npt.NDArray[np.bool_]:
        return np.fromiter(
            (self.query.matches(describe_record(record)) for record in records),
            dtype=bool,
            count=len(records),
        )


def select_as_shown(sources: Sequence[str], where: str, storage_options: StorageOptions = None) -> Selection:
    """The records of ``sources`` that the viewer's filter page shows for ``where`` (its own match,
    record by record: no torch needed), as a selection (the page's "save" button).

    Raises:
        QueryError: a filter that does not parse; SelectionError: one that keeps no record.
    """
    shards = scan_shards(sources, None, storage_options)
    return scan_selection(shards, QueryTest(parse_query(where)), storage_options=storage_options, where=where)


def select(
    sources: PathLike | Sequence[PathLike] | RecordFiles,
    *,
    where: str | None = None,
    predicate: Callable[[dict[str, Any]], Any] | None = None,
    spec: SpecArg = None,
    out: PathLike | None = None,
    jobs: int | None = 1,
    index: IndexArg = None,
    storage_options: StorageOptions = None,
    verify_crc: bool = True,
    progress: ScanProgress | None = None,
) -> Selection:
    """Scans every record of ``sources`` once and selects those that pass a filter or a predicate.

    Give the selection (or its file) to a dataset as ``select=``: it then reads only those
    records, with every promise a dataset makes (each once per epoch, equal batches on every
    rank, resume on another world size, mixing, the training frameworks).

    Args:
        sources: files, globs, directories, URLs or a manifest, as a dataset takes them (or a
            dataset's ``files``).
        where: a filter: ``"label == 3 and image/height >= 256"``, ``"label in [1, 7] or not
            text ~ dog"`` (``== != < <= > >=``, ``~`` for "contains", ``key in [a, b]``; ``not``,
            ``and``, ``or`` and parentheses; a list feature passes when any value does, a record
            without the feature passes no comparison). Only the features it names are decoded;
            their types come from the first 1,000 records (or ``spec``, for a feature few
            records set). Plain words (no operator) search every key and text value, as the
            viewer does: every feature is read.
        predicate: instead of ``where``, a function of a decoded sample (decoded by ``spec``;
            every feature as a VarLen when None) that returns whether to keep it.
        spec: the features' specs (see above).
        out: where to write the selection file (``.ttsel``), local or a URL; None: not written.
        jobs: processes that scan shards at once (None: the CPUs). A predicate given to several
            processes must be a module-level function (they are spawned and import it).
        index, storage_options: as for :class:`~torch_tfrecord.TFRecordDataset`.
        verify_crc: check every record's CRCs.
        progress: called with ``(records scanned since the last call, whether a shard ended)``.

    Returns:
        The selection (also written to ``out``).

    Raises:
        SelectionError: a filter that names a feature no record has, that compares a number
            feature with text, or that keeps no record; each before anything is written.
        QueryError: a filter that does not parse.

    Example:
        >>> sel = tt.select("train-*.tfrecord", where="label == 3", out="label3.ttsel")  # doctest: +SKIP
        >>> ds = tt.TFRecordDataset("train-*.tfrecord", select="label3.ttsel")  # doctest: +SKIP
    """
    if (where is None) == (predicate is None):
        raise ValueError("give where= (a filter) or predicate= (a function of a sample), one of them")
    if out is not None:
        _check_out(os.fspath(out))
    from .conditions import ConditionTest, PredicateTest, feature_types

    shards = scan_shards(sources, index, storage_options)
    test: RecordTest
    if where is not None:
        query = parse_query(where)
        if query.words:  # searched as the viewer searches: every key and text value
            test = QueryTest(query)
        else:
            test = ConditionTest(query, feature_types(shards, spec, storage_options))
    else:
        assert predicate is not None
        test = PredicateTest(predicate, spec)
        where = f"predicate {getattr(predicate, '__qualname__', repr(predicate))}"
    selection = scan_selection(
        shards,
        test,
        jobs=jobs,
        verify_crc=verify_crc,
        storage_options=storage_options,
        progress=progress,
        where=where,
    )
    if out is not None:
        selection.write(out, storage_options)
    return selection


def _check_out(out: str) -> None:
    """Refuses, before any scan, a local ``out`` whose folder does not exist."""
    if is_url(out):
        return
    folder = os.path.dirname(os.path.abspath(local_path(out)))
    if not os.path.isdir(folder):
        raise SelectionError(f"cannot write {out!r}: there is no folder {folder!r}")
