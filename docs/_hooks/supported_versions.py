"""MkDocs hook: the "Supported versions" page, generated at build time from the compatibility matrix's
saved results (docs/supported-versions.json, written by ``python .ci/compat.py``).

A page holds a line ``<!-- supported-versions -->``; the hook replaces it with the tables that
.ci/compat.py renders from the results (its own ``render_markdown``, loaded from the script), so the
page cannot drift from the run, nor from the tables the script prints.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
MARKER = "<!-- supported-versions -->"


def compat_script() -> ModuleType:
    """.ci/compat.py as a module (it is a script in a folder that is no package)."""
    spec = importlib.util.spec_from_file_location("compat", ROOT / ".ci" / "compat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _arguments(entries: list[str]) -> str:
    """A slice's pytest arguments for people: ``test_x.py, test_y.py (not test_z.py::case)``."""
    shown, left_out = [], []
    for previous, entry in zip(["", *entries], entries, strict=False):
        if entry.startswith("--"):
            continue
        name = f"`{entry.removeprefix('tests/')}`"
        (left_out if previous == "--deselect" else shown).append(name)
    return ", ".join(shown) + (f" (not {', '.join(left_out)})" if left_out else "")


def render() -> str:
    compat = compat_script()
    results = json.loads(compat.RESULTS.read_text())
    tested = compat.tested_versions(results)
    slices = "\n".join(f"- `{name}`: {_arguments(entries)}" for name, entries in results["slices"].items())
    claims = (
        f"Supported: CPython {tested['python'][0]} to {tested['python'][1]}, torch {tested['torch'][0]} to "
        f"{tested['torch'][1]}; "
        + ", ".join(
            f"{name} {' and '.join(f'{major}.x' for major in majors)}"
            for name, majors in tested["majors"].items()
            if majors and name not in ("torch", "protobuf", "torchvision")
        )
        + "."
    )
    run = sorted({stack.get("date", "") for stack in results["stacks"]} - {""})
    when = f" Run on {', '.join(run)}." if run else ""
    return "\n\n".join([claims + when, compat.render_markdown(results).strip(), "The slices:\n\n" + slices])


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
