"""The viewer's filter: ``label == 3``, ``image/object/class/text ~ dog and score >= 0.5``, or plain
words to search for in keys and text values. A list feature matches when any of its values does.

Pure: parsed once, then matched against described records.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import TFRecordError

__all__ = ["Query", "QueryError", "parse_query"]

_CLAUSE = re.compile(r"^\s*(?P<key>[^\s=!<>~]+)\s*(?P<op>==|!=|<=|>=|<|>|~)\s*(?P<value>.+?)\s*$")
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class QueryError(TFRecordError, ValueError):
    """A filter that does not parse."""


@dataclasses.dataclass(frozen=True)
class _Clause:
    key: str
    op: str
    value: str | float

    def matches(self, features: Mapping[str, tuple[str, list[Any]]]) -> bool:
        kind, values = features.get(self.key, ("empty", []))
        return any(self._one(kind, v) for v in values)

    def _one(self, kind: str, value: Any) -> bool:
        if kind == "bytes":
            value = value.decode("utf-8", errors="replace")
            wanted = self.value if isinstance(self.value, str) else _number_text(self.value)
            if self.op == "~":
                return wanted.lower() in value.lower()
            return _COMPARE[self.op](value, wanted)
        if isinstance(self.value, str):
            return self.op == "~" and self.value.lower() in str(value).lower()
        if self.op == "~":
            return _number_text(self.value) in str(value)
        return _COMPARE[self.op](value, self.value)


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _literal(text: str) -> str | float:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return float(text)
    except ValueError:
        return text


@dataclasses.dataclass(frozen=True)
class Query:
    """A parsed filter: clauses that must all match, and words to search for."""

    clauses: tuple[_Clause, ...]
    words: tuple[str, ...]
    text: str

    def matches(self, features: Mapping[str, tuple[str, list[Any]]] | None) -> bool:
        """Whether a record (its described features; None: not an Example) passes the filter."""
        if features is None:
            return False
        if not all(clause.matches(features) for clause in self.clauses):
            return False
        return all(_has_word(features, word) for word in self.words)


def _has_word(features: Mapping[str, tuple[str, list[Any]]], word: str) -> bool:
    needle = word.lower()
    for key, (kind, values) in features.items():
        if needle in key.lower():
            return True
        if kind == "bytes" and any(
            needle in v[:4096].decode("utf-8", errors="ignore").lower() for v in values
        ):
            return True
    return False


def parse_query(text: str) -> Query:
    """Parses a filter.

    ``key op value`` clauses joined by ``and`` (op: ``== != < <= > >=``, or ``~`` for "contains";
    a value in quotes is text, else a number if it reads as one); a part without an operator is
    a word to search for in the keys and text values.

    Raises:
        QueryError: an empty filter, or a clause with no value.
    """
    clauses: list[_Clause] = []
    words: list[str] = []
    for part in _AND.split(text.strip()):
        match = _CLAUSE.match(part)
        if match:
            clauses.append(_Clause(match["key"], match["op"], _literal(match["value"])))
        elif re.search(r"==|!=|<=|>=|[<>~]", part):
            raise QueryError(
                f"cannot read the filter {part!r}: write it as `key == value` (or != < <= > >= ~)"
            )
        elif part.strip():
            words.append(part.strip())
    if not clauses and not words:
        raise QueryError("the filter is empty")
    return Query(tuple(clauses), tuple(words), text)
