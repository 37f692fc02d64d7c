"""torch-tfrecord: read and write TFRecord files in PyTorch, with no TensorFlow.

The public names are imported on first use (PEP 562), so that ``import torch_tfrecord``, and the
command lines that need no tensors (``count``, ``verify``, ``head``, ``tfrecord-index``), start
without importing torch. Which names there are, and where each is defined, is one table:
``__init__.pyi``, which type checkers read, and this module reads once at import.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

from .support import optional as _optional  # noqa: F401  # TORCH_TFRECORD_HIDE, before anything imports them
from .support import versions as _versions

_versions.check_installed()  # an unsupported Python or torch: one clear error here, naming the range

__version__ = "0.1.0"
_HERE = Path(__file__).parent


def _read_table() -> tuple[dict[str, str], dict[str, str]]:
    """``(names, modules)`` from ``__init__.pyi``: each public name and the submodule defining it;
    each module the documentation reaches as an attribute (``tt.native``) and its dotted path."""
    names: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in ast.parse((_HERE / "__init__.pyi").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            folder = _HERE.joinpath(*node.module.split("."))
            for alias in node.names:
                is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                table = modules if is_module else names
                table[alias.asname or alias.name] = (
                    f"{node.module}.{alias.name}" if is_module else node.module
                )
    return names, modules


_EXPORTS, _MODULES = _read_table()
__all__ = sorted(_EXPORTS, key=lambda name: (not name.isupper(), not name[0].isupper(), name))  # isort


def __getattr__(name: str) -> Any:
    """A public name, imported from its submodule on first use; else a submodule (``tt.native``)."""
    module_name = _EXPORTS.get(name)
    if module_name is not None:
        value = getattr(importlib.import_module(f".{module_name}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _MODULES:
        return importlib.import_module(f".{_MODULES[name]}", __name__)
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise  # the submodule exists but needs something that is missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
