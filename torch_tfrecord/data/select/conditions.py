"""The tests of a selection's scan that decode records: filters (``label == 3 or text ~ dog``) on
decoded columns, a batch at a time, and Python predicates over decoded samples.

The meaning is the viewer's filter's (:mod:`torch_tfrecord.codec.query`), node for node: a clause
passes a record when any value of its list feature does, and no record without the feature (so
``not label == 3`` passes it); text is compared as text (a number as its text), ``~`` is
"contains" (without case for text); numbers are compared as numbers; ``and``, ``or`` and ``not``
are the masks' ``&``, ``|`` and ``~``. Only the clauses' features are decoded. A clause that names
no feature of the data, or compares a number feature with text, is refused before any record is
read, wherever it stands in the filter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ...codec.decode import SpecArg, decode_batch
from ...codec.filters import COMPARE, number_text
from ...codec.query import OPERATORS, AllOf, AnyOf, Clause, Node, Not, Query
from ...codec.ragged import Ragged
from ...codec.rows import split_batch
from ...codec.schema import sample_dtypes
from ...codec.spec import VarLen, normalize_spec
from ...errors import SelectionError
from ...records.io import StorageOptions
from .scan import SURVEY_RECORDS, ScanShard, first_records

__all__ = ["OPERATORS", "Condition", "ConditionTest", "PredicateTest", "feature_types"]

Mask = npt.NDArray[np.bool_]


@dataclasses.dataclass(frozen=True)
class Condition:
    """``key op value``: a feature, an operator of :data:`OPERATORS`, and text or a number."""

    key: str
    op: str
    value: str | float

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"op={self.op!r} must be one of {OPERATORS}")

    def __str__(self) -> str:
        value = repr(self.value) if isinstance(self.value, str) else number_text(self.value)
        return f"{self.key} {self.op} {value}"

    def check(self, dtype: Any) -> None:
        """Raises unless the clause can be tested on a feature of ``dtype`` (torch.int64,
        torch.float32 or bytes)."""
        if dtype is not bytes and isinstance(self.value, str) and self.op != "~":
            kind = "int64" if dtype == torch.int64 else "float"
            raise SelectionError(
                f"`{self}`: {self.key!r} holds {kind} values, which never equal or order with the text "
                f"{self.value!r}: compare it with a number (or use ~ to look for text in its numbers)"
            )

    def test(self, column: Any, size: int) -> Mask:
        """Which of ``size`` records pass, from their decoded VarLen column."""
        if isinstance(column, Ragged):
            values = column.values.numpy()
            offsets = column.offsets.numpy()
            hits = self._numbers(values)
        else:  # bytes: a list of values per record
            lengths = np.fromiter((len(row) for row in column), dtype=np.int64, count=size)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            hits = self._texts([value for row in column for value in row])
        seen = np.concatenate([[0], np.cumsum(hits, dtype=np.int64)])
        result: Mask = seen[offsets[1:]] > seen[offsets[:-1]]
        return result

    def _numbers(self, values: npt.NDArray[Any]) -> Mask:
        if self.op == "~" or isinstance(self.value, str):
            needle = self.value.lower() if isinstance(self.value, str) else number_text(self.value)
            shown = values.astype(np.float64).tolist() if values.dtype.kind == "f" else values.tolist()
            if isinstance(self.value, str):
                return np.array([needle in str(v).lower() for v in shown], dtype=bool)
            return np.array([needle in str(v) for v in shown], dtype=bool)
        wanted = self.value
        if values.dtype.kind in "iu" and wanted == int(wanted) and abs(wanted) < 2**63:
            return np.asarray(COMPARE[self.op](values, np.int64(int(wanted))), dtype=bool)
        return np.asarray(COMPARE[self.op](values.astype(np.float64), float(wanted)), dtype=bool)

    def _texts(self, values: Sequence[bytes]) -> Mask:
        wanted = self.value if isinstance(self.value, str) else number_text(self.value)
        texts = [value.decode("utf-8", errors="replace") for value in values]
        if self.op == "~":
            needle = wanted.lower()
            return np.array([needle in text.lower() for text in texts], dtype=bool)
        compare = COMPARE[self.op]
        return np.array([compare(text, wanted) for text in texts], dtype=bool)


class ConditionTest:
    """Which records pass a filter of clauses, decoding only their features.

    Args:
        query: the filter (:func:`~torch_tfrecord.codec.query.parse_query`), without plain words
            (they search every feature: the viewer's match does that, record by record).
        dtypes: each feature's type (torch.int64, torch.float32 or bytes), as the data holds it.

    Raises:
        SelectionError: a clause on a feature ``dtypes`` does not have, or on one of another type.
    """

    def __init__(self, query: Query, dtypes: Mapping[str, Any]) -> None:
        if query.words:
            raise ValueError(f"{query.text!r} searches for words, which a column test cannot")
        self.conditions = {clause: Condition(clause.key, clause.op, clause.value) for clause in query.clauses}
        for condition in self.conditions.values():
            if condition.key not in dtypes:
                known = ", ".join(sorted(dtypes)[:20]) or "none"
                raise SelectionError(
                    f"`{condition}` names {condition.key!r}, which no record read holds (features: "
                    f"{known}); for a feature only some records set, give its type (spec="
                    f"{{{condition.key!r}: 'int'}} in Python, --type {condition.key}=int on the command line)"
                )
            condition.check(dtypes[condition.key])
        self.tree = query.tree
        self.spec = {c.key: VarLen(dtypes[c.key]) for c in self.conditions.values()}

    def __call__(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> Mask:
        columns = decode_batch(records, self.spec, locations=locations)
        return self._mask(self.tree, columns, len(records))

    def _mask(self, node: Node, columns: Mapping[str, Any], size: int) -> Mask:
        if isinstance(node, Clause):
            return self.conditions[node].test(columns[node.key], size)
        if isinstance(node, Not):
            return ~self._mask(node.part, columns, size)
        if isinstance(node, (AllOf, AnyOf)):
            combine = np.logical_and if isinstance(node, AllOf) else np.logical_or
            passed = self._mask(node.parts[0], columns, size)
            for part in node.parts[1:]:
                passed = combine(passed, self._mask(part, columns, size))
            return passed
        raise AssertionError(f"a column test has no words to search for: {node!r}")


class PredicateTest:
    """A Python predicate over decoded samples (``spec``: as a dataset's; None: every feature)."""

    def __init__(self, predicate: Callable[[dict[str, Any]], Any], spec: SpecArg = None) -> None:
        if not callable(predicate):
            raise TypeError(f"predicate= must be callable, not {type(predicate).__name__}")
        self.predicate = predicate
        self.spec = normalize_spec(spec)

    def __call__(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> Mask:
        samples = split_batch(decode_batch(records, self.spec, locations=locations), len(records))
        return np.fromiter((bool(self.predicate(s)) for s in samples), dtype=bool, count=len(records))


def feature_types(
    shards: Sequence[ScanShard], spec: SpecArg, storage_options: StorageOptions
) -> dict[str, Any]:
    """Each feature's type (torch.int64, torch.float32 or bytes) as the first
    :data:`SURVEY_RECORDS` records hold it, with ``spec``'s types over them."""
    dtypes = sample_dtypes(first_records(shards, SURVEY_RECORDS, storage_options))
    for key, feature in (normalize_spec(spec) or {}).items():
        dtype = getattr(feature, "dtype", None)
        if dtype is not None:
            dtypes[key] = bytes if dtype in (bytes, str) else dtype
    return dtypes
