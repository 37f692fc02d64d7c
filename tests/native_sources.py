"""What setup.py compiles, read from its source (importing it would run setup()): the C flags and
the source files of each extension, for the tests that compile them themselves."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _assigned() -> dict[str, ast.expr]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    return {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def listed(name: str) -> list[str]:
    """A list of strings that setup.py assigns to ``name`` (FLAGS, NATIVE_SOURCES, JPEG_SOURCES ...)."""
    value = ast.literal_eval(_assigned()[name])
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), name
    return value


def sources(name: str) -> list[Path]:
    """The files of ``NATIVE_SOURCES`` or ``JPEG_SOURCES``, as paths."""
    return [ROOT / source for source in listed(name)]
