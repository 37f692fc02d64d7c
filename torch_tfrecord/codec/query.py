"""The viewer's filter: ``label == 3``, ``image/object/class/text ~ dog and score >= 0.5``, or plain
words to search for in keys and text values. A list feature matches when any of its values does.

Pure: parsed once, then matched against described records. Parsing is one pass over at most
:data:`MAX_QUERY` characters (a filter comes from a web page: no regular expression here may
backtrack).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ..errors import TFRecordError
from .filters import COMPARE as _COMPARE
from .filters import number_text as _number_text

__all__ = ["MAX_QUERY", "Query", "QueryError", "parse_query"]

MAX_QUERY = 1000
"""The longest filter read, in characters."""
_WORD = re.compile(r"\S+")
_KEY = re.compile(r"[^\s=!<>~]+")
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">", "~")


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


def _parts(text: str) -> list[str]:
    """The parts of ``text`` between the words ``and`` (any case; not first or last)."""
    parts, start = [], 0
    for word in _WORD.finditer(text):
        if word[0].lower() == "and" and word.start() > 0 and word.end() < len(text):
            parts.append(text[start : word.start()])
            start = word.end()
    parts.append(text[start:])
    return parts


def _clause(part: str) -> _Clause | None:
    """``key op value``, or None when ``part`` is not one."""
    key = _KEY.match(part)
    if key is None:
        return None
    rest = part[key.end() :].lstrip()
    operator = next((op for op in _OPERATORS if rest.startswith(op)), None)
    value = rest[len(operator or "") :].strip()
    if operator is None or not value:
        return None
    return _Clause(key[0], operator, _literal(value))


def parse_query(text: str) -> Query:
    """Parses a filter.

    ``key op value`` clauses joined by ``and`` (op: ``== != < <= > >=``, or ``~`` for "contains";
    a value in quotes is text, else a number if it reads as one); a part without an operator is
    a word to search for in the keys and text values.

    Raises:
        QueryError: an empty filter, one longer than :data:`MAX_QUERY` characters, or a clause
            with no value.
    """
    if len(text) > MAX_QUERY:
        raise QueryError(f"the filter has {len(text):,} characters; at most {MAX_QUERY:,} are read")
    clauses: list[_Clause] = []
    words: list[str] = []
    for part in _parts(text.strip()):
        part = part.strip()
        clause = _clause(part)
        if clause is not None:
            clauses.append(clause)
        elif any(op in part for op in _OPERATORS):
            raise QueryError(
                f"cannot read the filter {part[:80]!r}: write it as `key == value` (or != < <= > >= ~)"
            )
        elif part:
            words.append(part)
    if not clauses and not words:
        raise QueryError("the filter is empty")
    return Query(tuple(clauses), tuple(words), text)
