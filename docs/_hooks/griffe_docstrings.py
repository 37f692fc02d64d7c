"""Griffe extension: reads the package's docstrings as their authors meant them.

Two habits of this codebase's Google-style docstrings that griffe would otherwise misread,
rewritten in the text griffe parses (the source is left as it is):

- ``Example:`` holding ``>>>`` lines: griffe takes the singular title for an admonition of
  markdown (where ``ds[0]["label"]`` looks like a reference link); it becomes ``Examples:``,
  whose ``>>>`` lines are rendered as code.
- Sphinx roles (``:class:`Ragged```, ``:func:`torch_tfrecord.load_index```, ``:meth:``):
  griffe renders them as text with the role showing; they become code spans.
- ``rank, world_size: ...`` documenting several parameters at once: split into one entry per
  name, each with the shared description, so every parameter is checked against the signature.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):`~?([^`]+)`")
GROUPED = re.compile(r"^(\s+)(\w+(?:, \w+)+): (.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip()) if line.strip() else 0


def _split_grouped(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = GROUPED.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, names, first = match.groups()
        end = i + 1
        while end < len(lines) and _indent(lines[end]) > len(indent):
            end += 1
        for name in names.split(", "):
            out += [f"{indent}{name}: {first}", *lines[i + 1 : end]]
        i = end
    return "\n".join(out)


class DocstringHabits(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            text = EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _split_grouped(ROLE.sub(r"`\1`", text))
