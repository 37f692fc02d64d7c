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
from collections.abc import Iterable, Mapping

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
        """Parses ``label_map.pbtxt`` text.

        Raises:
            LabelMapError: naming the source and line of what does not parse.
        """
        names: dict[int, str] = {}
        display: dict[int, str] = {}
        position = 0
        for match in _ITEM.finditer(text):
            between = _COMMENT.sub("", text[position : match.start()]).strip()
            if between:
                raise LabelMapError(
                    f"{source} line {_line(text, position)}: expected 'item {{', found {between[:40]!r}"
                )
            position = match.end()
            fields: dict[str, str] = {}
            body = _COMMENT.sub("", match["body"])
            consumed = 0
            for field in _FIELD.finditer(body):
                if body[consumed : field.start()].strip():
                    break
                fields[field["key"]] = (
                    field["number"] if field["number"] is not None else _unquote(field["string"])
                )
                consumed = field.end()
            rest = body[consumed:].strip()
            line = _line(text, match.start())
            if rest:
                raise LabelMapError(f"{source} line {line}: cannot read {rest[:40]!r} in an item")
            if "id" not in fields or "name" not in fields:
                raise LabelMapError(f"{source} line {line}: an item needs both 'id' and 'name'")
            try:
                label = int(fields["id"])
            except ValueError:
                raise LabelMapError(f"{source} line {line}: id {fields['id']!r} is not an integer") from None
            if label in names:
                raise LabelMapError(f"{source} line {line}: id {label} appears twice")
            names[label] = fields["name"]
            if "display_name" in fields:
                display[label] = fields["display_name"]
        trailing = _COMMENT.sub("", text[position:]).strip()
        if trailing:
            raise LabelMapError(
                f"{source} line {_line(text, position)}: expected 'item {{', found {trailing[:40]!r}"
            )
        if not names:
            raise LabelMapError(f"{source}: no items")
        try:
            return cls(names, display)
        except LabelMapError as error:
            raise LabelMapError(f"{source}: {error}") from None


_ITEM = re.compile(r"item\s*\{(?P<body>[^{}]*)\}")
_COMMENT = re.compile(r"#[^\n]*")
_FIELD = re.compile(
    r"\s*(?P<key>[A-Za-z_]+)\s*:\s*(?:(?P<number>-?\d+)|(?P<string>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))\s*[;,]?"
)


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


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
    with open(candidate, encoding="utf-8-sig") as f:
        return dict(LabelMap.decode(f.read(), source=candidate).names)
