"""Pieces both command lines (`torch-tfrecord`, `tfrecord-index`) share."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_storage_options", "progress_bar", "storage_options"]

_HELP = (
    "fsspec storage options for URLs, as a JSON object, e.g. "
    '\'{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}\' (credentials may also come '
    "from the usual environment variables)"
)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, not {type(value).__name__}")
    return value


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--storage-options JSON`` to a (sub)command."""
    parser.add_argument("--storage-options", type=_json_object, default=None, metavar="JSON", help=_HELP)


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The parsed ``--storage-options`` of a command, if it has them."""
    return getattr(args, "storage_options", None)


def progress_bar(total: int, unit: str, enabled: bool) -> Any:
    """A tqdm bar on stderr when tqdm is installed and wanted, else None."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
