"""Pieces both command lines (`torch-tfrecord`, `tfrecord-index`) share: options and help layout."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = [
    "add_command",
    "add_debug_option",
    "add_storage_options",
    "storage_options",
]

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


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of the examples in an epilog."""


def add_command(commands: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """Adds a subcommand whose ``--help`` says what it does and ends with an example.

    Args:
        commands: what ``ArgumentParser.add_subparsers`` returned.
        name: the subcommand.
        help: one line, shown in the parent's list and as the description.
        example: a command line (or several, one per line).
    """
    epilog = "example:\n" + "\n".join(f"  {line}" for line in example.splitlines())
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help, epilog=epilog, formatter_class=_Formatter
    )
    return parser


def add_debug_option(parser: argparse.ArgumentParser, *subcommands: argparse.ArgumentParser) -> None:
    """``--debug`` (show an error's traceback) before the subcommand or after it."""
    help = "show the traceback of an error"
    parser.add_argument("--debug", action="store_true", help=help)
    for command in subcommands:
        # SUPPRESS: a subcommand without the flag leaves the parent's value as it is.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=help)
