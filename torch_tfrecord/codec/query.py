"""The filter language: ``label in [1, 7] and not text ~ dog``, ``(score > 0.5 or id == 3)``, or
plain words to search for in keys and text values.

``not`` binds tighter than ``and``, ``and`` than ``or``. A list feature matches a comparison when
any of its values does; a record without the feature matches none (so ``not label == 3`` passes
it).

Pure, and free of torch: a filter is parsed once into a tree (:class:`Clause`, :class:`Search`,
:class:`AllOf`, :class:`AnyOf`, :class:`Not`) that the viewer matches on described records and a
selection's scan on decoded columns (:mod:`torch_tfrecord.data.select.conditions`). Parsing is one pass
over at most :data:`MAX_QUERY` characters with no regular expression (a filter comes from a web
page), and parentheses and ``not`` nest at most :data:`MAX_DEPTH` deep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, NoReturn

from ..errors import TFRecordError
from .filters import COMPARE as _COMPARE
from .filters import number_text as _number_text

__all__ = [
    "MAX_DEPTH",
    "MAX_QUERY",
    "OPERATORS",
    "AllOf",
    "AnyOf",
    "Clause",
    "Node",
    "Not",
    "Query",
    "QueryError",
    "Search",
    "parse_query",
]

MAX_QUERY = 1000
"""The longest filter read, in characters."""
MAX_DEPTH = 32
"""How deep parentheses and ``not`` may nest."""
OPERATORS = ("==", "!=", "<=", ">=", "<", ">", "~")
"""A clause's operators (the two-character ones first: they are read before their first character)."""
_OPERATOR_START = frozenset("=!<>~")
_BRACKETS = frozenset("()[]")

Features = Mapping[str, tuple[str, list[Any]]]


class QueryError(TFRecordError, ValueError):
    """A filter that does not parse.

    Attributes:
        position: the character (counting from 0) where reading stopped; None for the filter as a
            whole (empty, too long).
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


@dataclasses.dataclass(frozen=True)
class Clause:
    """``key op value``: true when any value of the feature ``key`` compares so with ``value``."""

    key: str
    op: str
    value: str | float

    def matches(self, features: Features) -> bool:
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


@dataclasses.dataclass(frozen=True)
class Search:
    """Words to find (without case) in a feature's key or in its text values."""

    text: str

    def matches(self, features: Features) -> bool:
        needle = self.text.lower()
        for key, (kind, values) in features.items():
            if needle in key.lower():
                return True
            if kind == "bytes" and any(
                needle in v[:4096].decode("utf-8", errors="ignore").lower() for v in values
            ):
                return True
        return False


@dataclasses.dataclass(frozen=True)
class AllOf:
    """``a and b and ...``."""

    parts: tuple[Node, ...]

    def matches(self, features: Features) -> bool:
        return all(part.matches(features) for part in self.parts)


@dataclasses.dataclass(frozen=True)
class AnyOf:
    """``a or b or ...`` (and ``key in [a, b, ...]``: ``key == a or key == b or ...``)."""

    parts: tuple[Node, ...]

    def matches(self, features: Features) -> bool:
        return any(part.matches(features) for part in self.parts)


@dataclasses.dataclass(frozen=True)
class Not:
    """``not a``."""

    part: Node

    def matches(self, features: Features) -> bool:
        return not self.part.matches(features)


Node = Clause | Search | AllOf | AnyOf | Not


@dataclasses.dataclass(frozen=True)
class Query:
    """A parsed filter: its tree, and the text it was read from."""

    tree: Node
    text: str

    def matches(self, features: Features | None) -> bool:
        """Whether a record (its described features; None: not an Example) passes the filter."""
        return features is not None and self.tree.matches(features)

    @property
    def clauses(self) -> tuple[Clause, ...]:
        """Every comparison in the filter, in the order written."""
        return tuple(node for node in _walk(self.tree) if isinstance(node, Clause))

    @property
    def words(self) -> tuple[str, ...]:
        """Every text searched for in keys and text values, in the order written."""
        return tuple(node.text for node in _walk(self.tree) if isinstance(node, Search))


def _walk(node: Node) -> Iterator[Node]:
    yield node
    if isinstance(node, Not):
        yield from _walk(node.part)
    elif isinstance(node, (AllOf, AnyOf)):
        for part in node.parts:
            yield from _walk(part)


class _Token(NamedTuple):
    kind: str  # "word", "quoted", "op", "(", ")", "[", "]", ",", "end"
    text: str
    start: int
    end: int

    def keyword(self, *words: str) -> bool:
        return self.kind == "word" and self.text.lower() in words

    def shown(self) -> str:
        if self.kind == "end":
            return "the end of the filter"
        if self.kind == "word" and self.text.lower() in ("and", "or", "not", "in"):
            return f"the word {self.text!r} (quote it to use it as a value)"
        return repr(self.text) if self.kind != "quoted" else f"the quoted {self.text!r}"


def _ends_word(text: str, at: int, in_list: bool) -> bool:
    char = text[at]
    if char.isspace() or char in _BRACKETS or char in "=<>~" or (in_list and char == ","):
        return True
    return char == "!" and text.startswith("=", at + 1)


def _tokens(text: str) -> list[_Token]:
    """The filter's tokens, in one pass: a quote runs to the next quote of its kind, and a word to
    whitespace, a bracket, an operator (or, in a list, a comma)."""
    tokens: list[_Token] = []
    at, in_list = 0, False
    while at < len(text):
        char = text[at]
        if char.isspace():
            at += 1
        elif char in _BRACKETS or (in_list and char == ","):
            in_list = {"[": True, "]": False}.get(char, in_list)
            tokens.append(_Token(char, char, at, at + 1))
            at += 1
        elif char in "'\"":
            close = text.find(char, at + 1)
            if close < 0:
                raise _error(text, at, f"the quote {char} here does not close")
            tokens.append(_Token("quoted", text[at + 1 : close], at, close + 1))
            at = close + 1
        elif char in _OPERATOR_START and (op := _operator_at(text, at)) is not None:
            tokens.append(_Token("op", op, at, at + len(op)))
            at += len(op)
        elif char == "=":
            raise _error(text, at, "expected an operator, found '=': write == to compare")
        else:
            start = at
            while at < len(text) and not _ends_word(text, at, in_list):
                at += 1
            tokens.append(_Token("word", text[start:at], start, at))
    tokens.append(_Token("end", "", len(text), len(text)))
    return tokens


def _operator_at(text: str, at: int) -> str | None:
    return next((op for op in OPERATORS if text.startswith(op, at)), None)


def _error(text: str, at: int, what: str) -> QueryError:
    shown = text if len(text) <= 80 else f"...{text[max(0, at - 30) : at + 30]}..."
    return QueryError(f"cannot read the filter {shown!r} at character {at}: {what}", at)


def _number_or_text(text: str) -> str | float:
    try:
        return float(text)
    except ValueError:
        return text


class _Parser:
    """Recursive descent over the tokens, each read once: ``or`` of ``and`` of ``not``-terms."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def parse(self) -> Node:
        if self.tokens[0].kind == "end":
            raise QueryError("the filter is empty", 0)
        node = self.any_of(0)
        token = self.tokens[self.at]
        if token.kind == ")":
            self.fail(token, "a ( before this )", found=False)
        if token.kind == "op":
            self.fail(token, "and, or, or the end of the filter (a key is one word)")
        if token.kind != "end":
            self.fail(token, "and, or, or the end of the filter (quote a value that holds brackets)")
        return node

    def fail(self, token: _Token, expected: str, found: bool = True) -> NoReturn:
        what = f"expected {expected}" + (f", found {token.shown()}" if found else "")
        raise _error(self.text, token.start, what)

    def next(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def any_of(self, depth: int) -> Node:
        parts = [self.all_of(depth)]
        while self.tokens[self.at].keyword("or"):
            self.at += 1
            parts.append(self.all_of(depth))
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def all_of(self, depth: int) -> Node:
        parts = [self.negated(depth)]
        while self.tokens[self.at].keyword("and"):
            self.at += 1
            parts.append(self.negated(depth))
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def negated(self, depth: int) -> Node:
        nots = 0
        while self.tokens[self.at].keyword("not"):
            self.deeper(depth + nots)
            nots += 1
            self.at += 1
        node = self.term(depth + nots)
        for _ in range(nots):
            node = Not(node)
        return node

    def deeper(self, depth: int) -> None:
        if depth >= MAX_DEPTH:
            token = self.tokens[self.at]
            raise _error(self.text, token.start, f"parentheses and `not` nest more than {MAX_DEPTH} deep")

    def term(self, depth: int) -> Node:
        token = self.tokens[self.at]
        if token.kind == "(":
            self.deeper(depth)
            self.at += 1
            node = self.any_of(depth + 1)
            if self.tokens[self.at].kind != ")":
                self.fail(self.tokens[self.at], f"the ) that closes the ( at character {token.start}")
            self.at += 1
            return node
        if token.kind == "quoted":
            self.at += 1
            if self.tokens[self.at].kind == "op":
                self.fail(self.tokens[self.at], "and, or, ) or the end of the filter (a key is not quoted)")
            return self.search(token, token.text.strip())
        if token.kind != "word" or token.keyword("and", "or"):
            self.fail(token, "a clause (key == value), words to search for, not or (")
        after = self.tokens[self.at + 1]
        if after.kind == "op":
            self.at += 2
            return Clause(token.text, after.text, self.value())
        if after.keyword("in") and self.tokens[self.at + 2].kind == "[":
            self.at += 3
            return self.listed(token.text)
        return self.search(token, self.phrase())

    def search(self, token: _Token, text: str) -> Search:
        if not text:
            self.fail(token, "words to search for", found=False)
        return Search(text)

    def phrase(self) -> str:
        """Words up to ``and``, ``or`` or anything not a word, as written (spaces and all)."""
        first = last = self.tokens[self.at]
        while self.tokens[self.at].kind == "word" and not self.tokens[self.at].keyword("and", "or"):
            last = self.next()
        return self.text[first.start : last.end]

    def value(self) -> str | float:
        """A quoted text, or words read as a number if they are one (else as text)."""
        token = self.tokens[self.at]
        if token.kind == "quoted":
            self.at += 1
            return token.text
        if token.kind != "word" or token.keyword("and", "or"):
            self.fail(token, "a value (a number, a word or a quoted text)")
        return _number_or_text(self.phrase())

    def listed(self, key: str) -> Node:
        """``[a, b, ...]`` after ``key in``: any of ``key == a``, ``key == b``, ..."""
        clauses = [Clause(key, "==", self.value())]
        while self.tokens[self.at].kind == ",":
            self.at += 1
            clauses.append(Clause(key, "==", self.value()))
        if self.next().kind != "]":
            self.fail(self.tokens[self.at - 1], ", or ] after a listed value")
        return clauses[0] if len(clauses) == 1 else AnyOf(tuple(clauses))


def parse_query(text: str) -> Query:
    """Parses a filter.

    ``key op value`` clauses (op: ``== != < <= > >=``, or ``~`` for "contains") and ``key in [a,
    b, ...]`` (any listed value equals), combined with ``not``, ``and``, ``or`` (binding in that
    order, tightest first) and parentheses; the keywords in any case. A value in quotes is text,
    else a number if it reads as one; words without an operator are searched for in the keys and
    text values. ``and``, ``or``, brackets and (in a list) commas end an unquoted value: quote a
    value that holds them (``text ~ "cat or dog"``).

    Raises:
        QueryError: an empty filter, one longer than :data:`MAX_QUERY` characters, one nested more
            than :data:`MAX_DEPTH` deep, or one that does not parse; the message names the
            character where reading stopped and what was expected there.
    """
    if len(text) > MAX_QUERY:
        raise QueryError(f"the filter has {len(text):,} characters; at most {MAX_QUERY:,} are read")
    return Query(_Parser(text).parse(), text)
