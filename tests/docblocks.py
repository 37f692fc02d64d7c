"""The Python blocks of markdown pages, as the docs tests run them, with their markers.

A block may be preceded (on the line just before its fence) by ``<!-- skip: why -->``: a test
cannot run it, for that reason; or by ``<!-- extras: a, b -->``: it needs those extras of the
package beyond the core install (the README's blocks run in a fresh environment with only those);
or by ``<!-- needs: java -->``: a system program it needs (tests/system_programs.py), without which
the docs tests skip the page, naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- (skip|extras|needs): (.+?) -->$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")

# Every block of a page in one process and namespace; each compiled under the page's name with
# its real line numbers, so a traceback reads "docs/guides/ddp.md", line 42.
RUNNER = """
import json, sys
if __name__ == "__main__":
    blocks = json.load(open(sys.argv[1]))
    namespace = {"__name__": "__main__"}
    for block in blocks:
        source = "\\n" * (block["line"] - 1) + block["source"]
        exec(compile(source, block["page"], "exec"), namespace)
"""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the block's first line of code
    source: str
    skip: str | None  # the reason, when marked
    extras: tuple[str, ...] = ()  # the package's extras it needs
    needs: tuple[str, ...] = ()  # the system programs it needs


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced ```python blocks of a markdown file, with their markers."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    marker: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        marked = MARKER.match(lines[i].strip())
        if marked:
            marker = (marked[1], marked[2])
        elif fence:
            indent, language = fence[1], fence[2]
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if language == "python":
                code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end])
                kind, text = marker or ("", "")
                skip = text if kind == "skip" else None
                extras = tuple(e.strip() for e in text.split(",")) if kind == "extras" else ()
                needs = tuple(e.strip() for e in text.split(",")) if kind == "needs" else ()
                found.append(Block(str(path.relative_to(root)), i + 2, code + "\n", skip, extras, needs))
            elif marker is not None:
                raise ValueError(f"{path}:{i + 1}: a {marker[0]} marker before a {language or 'plain'} block")
            marker = None
            i = end
        elif lines[i].strip() and marker is not None:
            raise ValueError(f"{path}:{i + 1}: a {marker[0]} marker must come just before a ```python block")
        i += 1
    return found
