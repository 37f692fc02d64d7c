"""Filter clauses (``label == 3``, ``text ~ dog``) tested on decoded columns, a batch at a time.

The meaning is the viewer's filter's (:mod:`torch_tfrecord.viewer.query`), clause for clause: a
list feature passes when any of its values does, a record without the feature does not; text is
compared as text (a number as its text), ``~`` is "contains" (without case for text); numbers are
compared as numbers. Only the clauses' features are decoded. A clause that names no feature of the
data, or compares a number feature with text, is refused before any record is read.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..codec.decode import decode_batch
from ..codec.ragged import Ragged
from ..codec.spec import VarLen
from ..errors import SelectionError

__all__ = ["OPERATORS", "Condition", "ConditionTest"]

OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "~")
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
Mask = npt.NDArray[np.bool_]


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


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
        value = repr(self.value) if isinstance(self.value, str) else _number_text(self.value)
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
            needle = self.value.lower() if isinstance(self.value, str) else _number_text(self.value)
            shown = values.astype(np.float64).tolist() if values.dtype.kind == "f" else values.tolist()
            if isinstance(self.value, str):
                return np.array([needle in str(v).lower() for v in shown], dtype=bool)
            return np.array([needle in str(v) for v in shown], dtype=bool)
        wanted = self.value
        if values.dtype.kind in "iu" and wanted == int(wanted) and abs(wanted) < 2**63:
            return np.asarray(_COMPARE[self.op](values, np.int64(int(wanted))), dtype=bool)
        return np.asarray(_COMPARE[self.op](values.astype(np.float64), float(wanted)), dtype=bool)

    def _texts(self, values: Sequence[bytes]) -> Mask:
        wanted = self.value if isinstance(self.value, str) else _number_text(self.value)
        texts = [value.decode("utf-8", errors="replace") for value in values]
        if self.op == "~":
            needle = wanted.lower()
            return np.array([needle in text.lower() for text in texts], dtype=bool)
        compare = _COMPARE[self.op]
        return np.array([compare(text, wanted) for text in texts], dtype=bool)


class ConditionTest:
    """Which records pass every condition, decoding only their features.

    Args:
        conditions: the clauses, all of which must pass.
        dtypes: each feature's type (torch.int64, torch.float32 or bytes), as the data holds it.

    Raises:
        SelectionError: a clause on a feature ``dtypes`` does not have, or on one of another type.
    """

    def __init__(self, conditions: Sequence[Condition], dtypes: Mapping[str, Any]) -> None:
        if not conditions:
            raise SelectionError("a filter needs at least one clause")
        for condition in conditions:
            if condition.key not in dtypes:
                known = ", ".join(sorted(dtypes)[:20]) or "none"
                raise SelectionError(
                    f"`{condition}` names {condition.key!r}, which no record read holds (features: "
                    f"{known}); for a feature only some records set, give its type (spec="
                    f"{{{condition.key!r}: 'int'}} in Python, --type {condition.key}=int on the command line)"
                )
            condition.check(dtypes[condition.key])
        self.conditions = tuple(conditions)
        self.spec = {c.key: VarLen(dtypes[c.key]) for c in self.conditions}

    def __call__(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> Mask:
        columns = decode_batch(records, self.spec, locations=locations)
        passed = np.ones(len(records), dtype=bool)
        for condition in self.conditions:
            passed &= condition.test(columns[condition.key], len(records))
        return passed
