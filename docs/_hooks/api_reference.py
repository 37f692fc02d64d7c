"""MkDocs hook: the API reference, one mkdocstrings entry per name in ``torch_tfrecord.__all__``.

A page holds the line ``<!-- api-reference -->``; the hook replaces it with ``::: module.name``
directives (rendered by mkdocstrings from the docstrings), grouped by the module that defines
each name, modules in the order of GROUPS and then any others. Built from ``__all__`` itself,
the page lists every public name and nothing else, wherever a name's code lives.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

MARKER = "<!-- api-reference -->"
PACKAGE = "torch_tfrecord"
# Section titles in reading order, by the last part of the defining module's name.
GROUPS = {
    "dataset": "Datasets",
    "pack": "Packing token sequences",
    "bucket": "Length buckets",
    "selecting": "Selecting records",
    "selection": "Selections",
    "load_stats": "Load telemetry",
    "_pipeline": "Keys the datasets add",
    "spec": "Feature specs",
    "codec": "Decoding",
    "ragged": "Ragged values",
    "collate": "Batching samples",
    "schema": "Inferring a spec",
    "vision": "Images and detection",
    "reader": "Reading records",
    "writer": "Writing records",
    "encode": "Encoding Examples",
    "index": "Indexes",
    "framing": "Framing",
    "order": "Epoch order",
    "errors": "Errors",
}


def defining_module(name: str) -> str:
    """The module whose code defines the public name (not the package that re-exports it)."""
    package = importlib.import_module(PACKAGE)
    value = getattr(package, name)
    module = getattr(value, "__module__", None)
    if isinstance(module, str) and module.startswith(PACKAGE + ".") and not isinstance(value, str):
        return module
    # A constant has no __module__: the submodule that lists it in its own __all__.
    for module_name, module_object in sorted(sys.modules.items()):
        if module_name.startswith(PACKAGE + ".") and name in getattr(module_object, "__all__", ()):
            return module_name
    raise LookupError(f"cannot find the module that defines {PACKAGE}.{name}")


def _source_line(value: Any) -> int:
    """Where a class or function starts in its module (constants first): the module's own order."""
    try:
        return inspect.getsourcelines(value)[1]
    except (TypeError, OSError):
        return 0


def render() -> str:
    package = importlib.import_module(PACKAGE)
    by_module: dict[str, list[str]] = {}
    for name in package.__all__:
        by_module.setdefault(defining_module(name), []).append(name)
    order = list(GROUPS)
    modules = sorted(
        by_module,
        key=lambda m: (order.index(m.rsplit(".", 1)[1]) if m.rsplit(".", 1)[1] in order else len(order), m),
    )
    lines: list[str] = []
    for module in modules:
        title = GROUPS.get(module.rsplit(".", 1)[1], module)
        lines += [f"## {title}", "", f"Defined in `{module}`.", ""]
        for name in sorted(by_module[module], key=lambda n: _source_line(getattr(package, n))):
            lines += [f"::: {module}.{name}", ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
