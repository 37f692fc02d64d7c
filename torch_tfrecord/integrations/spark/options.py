"""The options of format ``"tfrecord"``, as Spark hands them (strings), parsed and checked."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...codec.spec import FeatureSpec
from ...codec.spec_file import decode_spec_json
from ...errors import SpecError

__all__ = ["flag", "parse_spec_option", "positive", "sources_of", "storage_options_of"]


def parse_spec_option(text: str, option: str = "spec") -> dict[str, dict[str, FeatureSpec]]:
    """A spec option: a ``spec.json`` document, or just its ``{"key": {"kind": ...}}`` mapping.

    Returns:
        ``{"spec": ...}`` or ``{"context_spec": ..., "sequence_spec": ...}``.

    Raises:
        SpecError: not JSON, or a feature that is not a spec (an unknown kind, a bad dtype ...),
            naming the option and key.
    """
    try:
        document = json.loads(text)
    except ValueError as error:
        raise SpecError(f"option {option!r} is not JSON: {str(error)[:200]}") from None
    if isinstance(document, dict) and "format" not in document:
        document = {"format": "torch-tfrecord-spec", "version": 1, "spec": document}
    parsed = decode_spec_json(json.dumps(document), f"option {option!r}")
    if parsed is None:
        raise SpecError(f"option {option!r} is not a torch-tfrecord spec")
    return parsed


def flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValueError(f"option {key!r}={value!r} must be 'true' or 'false'")
    return value.lower() == "true"


def positive(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"option {key!r}={value!r} must be a positive integer")
    return number


def sources_of(options: Mapping[str, str]) -> list[str]:
    """The ``path`` option (``load(path)``), or ``paths``: a JSON list of paths, globs, URLs."""
    if "paths" in options:
        paths = json.loads(options["paths"])
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise ValueError(f"option 'paths'={options['paths']!r} must be a JSON list of paths")
        return paths
    if not options.get("path"):
        raise ValueError("no path: spark.read.format('tfrecord').load(path), or option('paths', json_list)")
    return [options["path"]]


def storage_options_of(options: Mapping[str, str]) -> dict[str, Any]:
    text = options.get("storage_options")
    found = json.loads(text) if text else {}
    if not isinstance(found, dict):
        raise ValueError("option 'storage_options' must be a JSON object")
    return found
