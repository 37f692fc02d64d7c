"""Label maps in the TensorFlow Object Detection API's ``label_map.pbtxt`` text format.

    item {
      id: 1
      name: 'cat'
    }

Ids start at 1 (0 is the background class of detection models). ``display_name`` is read and
written when present. Parsing is pure (text in, :class:`LabelMap` out); reading and writing
files go through ``torch_tfrecord.records.io``, so label maps may live beside remote shards too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator, Mapping

from ..errors import TFRecordError

__all__ = ["LabelMap", "LabelMapError", "class_names_beside"]


class LabelMapError(TFRecordError, ValueError):
    """A label map that cannot be parsed, or that names a class twice."""


@dataclasses.dataclass(frozen=True)
class LabelMap:
    """Class names by id (ids from 1, not necessarily contiguous when read from a file).

    Attributes:
        names: ``{id: name}``.
        display_names: ``{id: display name}`` for the items that have one.
    """

    names: Mapping[int, str]
    display_names: Mapping[int, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: dict[str, int] = {}
        for label, name in self.names.items():
            if not isinstance(label, int) or label < 1:
                raise LabelMapError(f"label map id {label!r} for {name!r} must be an integer >= 1")
            if name in seen:
                raise LabelMapError(f"label map names {name!r} twice (ids {seen[name]} and {label})")
            seen[name] = label

    @classmethod
    def from_names(cls, names: Iterable[str]) -> LabelMap:
        """Ids 1, 2, ... for the names in the order given."""
        return cls({i: name for i, name in enumerate(names, start=1)})

    def id_of(self, name: str) -> int | None:
        """The id of a class name, or None."""
        for label, known in self.names.items():
            if known == name:
                return label
        return None

    def __len__(self) -> int:
        return len(self.names)

    def encode(self) -> str:
        """The ``label_map.pbtxt`` text, items in id order."""
        blocks = []
        for label in sorted(self.names):
            lines = [f"  id: {label}", f"  name: {_quote(self.names[label])}"]
            if label in self.display_names:
                lines.append(f"  display_name: {_quote(self.display_names[label])}")
            blocks.append("item {\n" + "\n".join(lines) + "\n}\n")
        return "".join(blocks)

    @classmethod
    def decode(cls, text: str, source: str = "<label map>") -> LabelMap:
        """Parses ``label_map.pbtxt`` text, in one pass (time linear in its length), of at
        most :data:`MAX_LABEL_MAP` characters.

        Raises:
            LabelMapError: naming the source and line of what does not parse.
        """
        if len(text) > MAX_LABEL_MAP:
            raise LabelMapError(
                f"{source}: {len(text):,} characters, more than a label map holds ({MAX_LABEL_MAP:,})"
            )
        names: dict[int, str] = {}
        display: dict[int, str] = {}
        for line, fields in _items(_tokens(text, source), source):
            if "id" not in fields or "name" not in fields:
                raise LabelMapError(f"{source} line {line}: an item needs both 'id' and 'name'")
            if not _INTEGER.fullmatch(fields["id"]) or len(fields["id"]) > 20:
                raise LabelMapError(f"{source} line {line}: id {fields['id'][:40]!r} is not an integer")
            label = int(fields["id"])
            if label in names:
                raise LabelMapError(f"{source} line {line}: id {label} appears twice")
            names[label] = fields["name"]
            if "display_name" in fields:
                display[label] = fields["display_name"]
        if not names:
            raise LabelMapError(f"{source}: no items")
        try:
            return cls(names, display)
        except LabelMapError as error:
            raise LabelMapError(f"{source}: {error}") from None


MAX_LABEL_MAP = 16 << 20
"""The longest label map read, in characters (a million classes' names fit)."""
# One token at a time, each alternative read in one scan (none can backtrack into another).
_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<comment>#[^\n]*)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<number>-?[0-9]+)"
    r"|(?P<string>'[^'\\\n]*(?:\\.[^'\\\n]*)*'|\"[^\"\\\n]*(?:\\.[^\"\\\n]*)*\")|(?P<mark>[{}:;,])"
)
_INTEGER = re.compile(r"-?[0-9]+")


def _tokens(text: str, source: str) -> Iterator[tuple[str, str, int]]:
    """``(kind, text, line)`` of each token but spaces and comments."""
    position, line = 0, 1
    while position < len(text):
        token = _TOKEN.match(text, position)
        if token is None:
            raise LabelMapError(f"{source} line {line}: cannot read {text[position : position + 40]!r}")
        kind = token.lastgroup or ""
        if kind not in ("space", "comment"):
            yield kind, token[0], line
        line += token[0].count("\n")
        position = token.end()


def _items(tokens: Iterator[tuple[str, str, int]], source: str) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, {field: value})`` of each ``item { ... }``: numbers as their text, strings unquoted."""
    for kind, text, line in tokens:
        opening = next(tokens, ("end", "", line))
        if (kind, text) != ("word", "item") or opening[1] != "{":
            raise LabelMapError(f"{source} line {line}: expected 'item {{', found {text[:40]!r}")
        fields: dict[str, str] = {}
        while True:
            key = next(tokens, ("end", "the end", line))
            if key[1] == "}":
                break
            if key[1] in (";", ","):  # (text format's optional separators)
                continue
            colon, value = next(tokens, ("end", "", line)), next(tokens, ("end", "", line))
            if key[0] != "word" or colon[1] != ":" or value[0] not in ("number", "string"):
                raise LabelMapError(f"{source} line {key[2]}: cannot read {key[1][:40]!r} in an item")
            fields[key[1]] = value[1] if value[0] == "number" else _unquote(value[1])
        yield line, fields


def _quote(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _unquote(literal: str) -> str:
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def class_names_beside(path: str) -> dict[int, str] | None:
    """The names of the ``label_map.pbtxt`` the converters write beside their shards: in the
    folder ``path`` is, or names; None when there is none (or ``path`` is not local).

    Raises:
        LabelMapError: the label map does not parse.
    """
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    candidate = os.path.join(folder, "label_map.pbtxt")
    if not os.path.isfile(candidate):
        return None
    if os.path.getsize(candidate) > 4 * MAX_LABEL_MAP:  # (4 bytes a character at most)
        raise LabelMapError(f"{candidate}: larger than a label map holds")
    try:
        with open(candidate, encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise LabelMapError(f"{candidate}: not UTF-8 text (byte {error.start})") from None
    return dict(LabelMap.decode(text, source=candidate).names)
