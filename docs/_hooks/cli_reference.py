"""MkDocs hook: the CLI reference pages, generated from the argparse parsers at build time.

A page holds a line ``<!-- cli-reference: module:function -->``; the hook replaces it with one
section per command and subcommand of the parser that ``function()`` returns, each with the
command's ``--help`` exactly as the command prints it. Nothing is copied by hand, so the page
cannot drift from the code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
from typing import Any

MARKER = re.compile(r"^<!-- cli-reference: ([\w.]+):(\w+) -->$", re.MULTILINE)
HELP_WIDTH = "80"  # columns argparse wraps the help to (it reads $COLUMNS)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                found.append((name, helps.get(name, ""), subparser))
    return found


def _sections(parser: argparse.ArgumentParser, summary: str, depth: int) -> list[str]:
    heading = "#" * min(depth, 6)
    lines = [f"{heading} `{parser.prog}`", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    for _name, help_, subparser in _subcommands(parser):
        lines += _sections(subparser, help_, depth + 1)
    return lines


def render(module: str, function: str) -> str:
    """The markdown reference of the parser ``module.function()`` builds."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        parser = getattr(importlib.import_module(module), function)()
        return "\n".join(_sections(parser, "", 2))
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: render(match[1], match[2]), markdown)
