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

from .proto import Example

__all__ = ["describe_record", "doubt_keys", "format_json", "format_text", "show_key"]

_KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}
_SHOWN_VALUES = 8
_SHOWN_BYTES = 24


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
    return f"<{len(value):,} bytes {prefix}{more}>"


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


def format_text(number: int, payload: bytes, location: str = "") -> str:
    """A record as indented lines: one per feature, with kind, count and the first values."""
    head = f"record {number}{f' ({location})' if location else ''}: {len(payload):,} bytes"
    features = describe_record(payload)
    if features is None:
        return f"{head}, not an Example: {_show_bytes(payload)}"
    if not features:
        return f"{head}, an Example with no features"
    names = {key: show_key(key) for key in features}
    width = max(len(name) for name in names.values())
    lines = [head]
    doubt = doubt_keys(list(features))
    if doubt:
        lines.append(f"  warning: {doubt}")
    for key, (kind, values) in features.items():
        lines.append(f"  {names[key]:<{width}}  {kind}[{len(values)}]  {_show_values(kind, values)}")
    return "\n".join(lines)


def format_json(number: int, payload: bytes, location: str = "") -> str:
    """A record as one JSON line; bytes as base64, floats and ints as numbers."""
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
        line["features"] = {
            key: {
                "type": kind,
                "values": [base64.b64encode(v).decode() for v in values] if kind == "bytes" else values,
            }
            for key, (kind, values) in features.items()
        }
    return json.dumps(line, allow_nan=True)
