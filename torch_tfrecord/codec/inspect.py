"""Looking inside records: each feature's type and values, as readable text or JSON lines.

Pure: serialized records in, text out. The command line (``torch-tfrecord head``) reads the
records; this module only describes them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError

from ..proto import Example, SequenceExample
from ..support.text import plural

__all__ = [
    "as_sequence_example",
    "describe_feature_lists",
    "describe_record",
    "doubt_keys",
    "format_json",
    "format_text",
    "show_key",
]

_KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}
_SHOWN_VALUES = 8
_SHOWN_BYTES = 24
_SHOWN_STEPS = 4


def describe_record(payload: bytes) -> dict[str, tuple[str, list[Any]]] | None:
    """``{key: (kind, values)}`` of a serialized Example (keys sorted); None if it is not one."""
    try:
        example = Example.FromString(payload)
    except DecodeError:
        return None
    features: dict[str, tuple[str, list[Any]]] = {}
    for key in sorted(example.features.feature):
        feature = example.features.feature[key]
        which = feature.WhichOneof("kind")
        if which is None:
            features[key] = ("empty", [])
        else:
            features[key] = (_KINDS[which], list(getattr(feature, which).value))
    return features


def as_sequence_example(payload: bytes) -> Any | None:
    """The record as a ``tf.train.SequenceExample``, or None if it is not one.

    A SequenceExample's context is field 1, as an Example's features are: an Example reads as a
    SequenceExample with no feature lists, and a SequenceExample as an Example with an unknown
    field 2. A record is taken as a SequenceExample when it sets ``feature_lists`` (field 2), with
    feature list names that people could have written (see :func:`doubt_keys`: TF-Ranking's
    ExampleListWithContext also has a field 2, which reads as feature lists named with serialized
    Features).
    """
    try:
        message = SequenceExample.FromString(payload)
    except DecodeError:
        return None
    if not message.HasField("feature_lists") or doubt_keys(list(message.feature_lists.feature_list)):
        return None
    return message


def describe_feature_lists(payload: bytes) -> dict[str, tuple[str, list[list[Any]]]] | None:
    """``{key: (kind, steps)}`` of a SequenceExample's feature lists (keys sorted), each step a
    list of values; None if the record is not a SequenceExample (:func:`as_sequence_example`).

    The kind is that of the steps that set a list (``"empty"`` when none does; the kinds joined
    by ``/`` when steps disagree, which TensorFlow refuses to parse).
    """
    message = as_sequence_example(payload)
    if message is None:
        return None
    lists: dict[str, tuple[str, list[list[Any]]]] = {}
    for key in sorted(message.feature_lists.feature_list):
        kinds: list[str] = []
        steps: list[list[Any]] = []
        for feature in message.feature_lists.feature_list[key].feature:
            which = feature.WhichOneof("kind")
            if which is None:
                steps.append([])
                continue
            if _KINDS[which] not in kinds:
                kinds.append(_KINDS[which])
            steps.append(list(getattr(feature, which).value))
        lists[key] = ("/".join(kinds) or "empty", steps)
    return lists


def show_key(key: str) -> str:
    """A feature name as it can be printed in a table: control and other unprintable
    characters escaped (``\\n``, ``\\x05``), printable text (any script) as it is."""
    if key.isprintable():
        return key
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in key)


def doubt_keys(keys: Sequence[str]) -> str | None:
    """Why records with these feature names are probably not Examples at all, or None.

    Other messages can parse as an Example by accident: TF-Ranking's ExampleListWithContext
    (field 1: repeated Example) reads as one whose feature names are serialized Features,
    control characters and all. Names written by people are printable text.
    """
    odd = [key for key in keys if not key.isprintable()]
    if not odd:
        return None
    return (
        f"{len(odd)} of {len(keys)} feature names hold control characters (e.g. '{show_key(odd[0])}'): "
        "these records are probably not tf.train.Examples but another message that happens to parse "
        "as one (e.g. TF-Ranking's ExampleListWithContext); read them as raw bytes with "
        "tt.read_records(path) and parse them with their own message type"
    )


def _show_bytes(value: bytes) -> str:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and len(text) <= 64:
        return repr(text)
    prefix = value[:_SHOWN_BYTES].hex()
    more = "..." if len(value) > _SHOWN_BYTES else ""
    return f"<{plural(len(value), 'byte')} {prefix}{more}>"


def _show_values(kind: str, values: Sequence[Any]) -> str:
    shown = values[:_SHOWN_VALUES]
    if kind == "bytes":
        parts = [_show_bytes(v) for v in shown]
    elif kind == "float":
        parts = [f"{v:.7g}" for v in shown]
    else:
        parts = [str(v) for v in shown]
    if len(values) > _SHOWN_VALUES:
        parts.append(f"... ({len(values) - _SHOWN_VALUES} more)")
    return " ".join(parts)


def _show_steps(kind: str, steps: Sequence[Sequence[Any]]) -> str:
    shown = [f"[{_show_values(kind, step)}]" for step in steps[:_SHOWN_STEPS]]
    if len(steps) > _SHOWN_STEPS:
        shown.append(f"... ({plural(len(steps) - _SHOWN_STEPS, 'more step')})")
    return " ".join(shown)


def _feature_lines(features: dict[str, tuple[str, list[Any]]], indent: str) -> list[str]:
    names = {key: show_key(key) for key in features}
    width = max(len(name) for name in names.values())
    return [
        f"{indent}{names[key]:<{width}}  {kind}[{len(values)}]  {_show_values(kind, values)}"
        for key, (kind, values) in features.items()
    ]


def _sequence_text(head: str, context: dict[str, tuple[str, list[Any]]], payload: bytes) -> str:
    lists = describe_feature_lists(payload) or {}
    lines = [f"{head}, a SequenceExample"]
    doubt = doubt_keys(list(context))
    if doubt:
        lines.append(f"  warning: {doubt}")
    lines.append(f"  context: {plural(len(context), 'feature')}")
    if context:
        lines += _feature_lines(context, "    ")
    lines.append(f"  feature lists: {plural(len(lists), 'list')}")
    if lists:
        names = {key: show_key(key) for key in lists}
        width = max(len(name) for name in names.values())
        kinds = {
            key: f"{kind}, {plural(len(steps), 'step')}" if steps else "0 steps"
            for key, (kind, steps) in lists.items()
        }
        kind_width = max(len(text) for text in kinds.values())
        for key, (kind, steps) in lists.items():
            shown = _show_steps(kind, steps)
            lines.append(f"    {names[key]:<{width}}  {kinds[key]:<{kind_width}}  {shown}".rstrip())
    return "\n".join(lines)


def format_text(number: int, payload: bytes, location: str = "") -> str:
    """A record as indented lines: one per feature, with kind, count and the first values.

    A SequenceExample shows its context features so, then each feature list with its kind, its
    number of steps and the first steps' values.
    """
    head = f"record {number}{f' ({location})' if location else ''}: {plural(len(payload), 'byte')}"
    features = describe_record(payload)
    if features is None:
        return f"{head}, not an Example: {_show_bytes(payload)}"
    if as_sequence_example(payload) is not None:
        return _sequence_text(head, features, payload)
    if not features:
        return f"{head}, an Example with no features"
    lines = [head]
    doubt = doubt_keys(list(features))
    if doubt:
        lines.append(f"  warning: {doubt}")
    lines += _feature_lines(features, "  ")
    return "\n".join(lines)


def _json_values(kind: str, values: Sequence[Any]) -> list[Any]:
    return [base64.b64encode(v).decode() for v in values] if kind == "bytes" else list(values)


def format_json(number: int, payload: bytes, location: str = "") -> str:
    """A record as one JSON line; bytes as base64, floats and ints as numbers.

    An Example's features are under ``"features"``; a SequenceExample's context features under
    ``"context"`` and its feature lists under ``"feature_lists"``:
    ``{key: {"type": kind, "steps": [[values], ...]}}``.
    """
    features = describe_record(payload)
    line: dict[str, Any] = {"record": number, "bytes": len(payload)}
    if location:
        line["location"] = location
    if features is None:
        line["raw"] = base64.b64encode(payload).decode()
    else:
        doubt = doubt_keys(list(features))
        if doubt:
            line["warning"] = doubt
        described = {
            key: {"type": kind, "values": _json_values(kind, values)}
            for key, (kind, values) in features.items()
        }
        lists = describe_feature_lists(payload)
        if lists is None:
            line["features"] = described
        else:
            line["context"] = described
            line["feature_lists"] = {
                key: {"type": kind, "steps": [_json_values(kind, step) for step in steps]}
                for key, (kind, steps) in lists.items()
            }
    return json.dumps(line, allow_nan=True)
