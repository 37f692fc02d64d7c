"""Every cross-reference in the package's docstrings and the docs resolves: a ``:mod:``, ``:func:``,
``:class:``, ``:meth:``, ``:data:``, ``:attr:`` or ``:exc:`` role names something that exists, so a
module moved or renamed cannot leave a reference pointing at nothing.

A name resolves as Sphinx would look for it: absolute (``torch_tfrecord.data.order.plan.EpochPlan``),
relative to the module it is written in (``.order``, ``..errors.TFRecordError``), or, bare, in
that module's namespace (or as an attribute of one of its classes); ``tt.`` stands for the package.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc):`~?([^`<>]+?)`")
PACKAGES = ("torch_tfrecord", "index_tools")
MISSING = object()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _python_files() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not path.name.endswith("_pb2.py")
    ]


def _lookup(dotted: str) -> Any:
    """The object a fully dotted name stands for: the longest importable module, then attributes
    (None, standing for a name that cannot be looked up here, in a GATED module without its extra)."""
    if _missing_extra(dotted):
        return None
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part, MISSING)
            if value is MISSING:
                return MISSING
        return value
    return MISSING


def _resolve(name: str, module: str | None, is_package: bool) -> bool:
    if name.startswith("tt."):
        name = "torch_tfrecord." + name[3:]
    if name.startswith("."):
        if module is None:
            return False
        dots = len(name) - len(name.lstrip("."))
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (dots - 1)] if dots > 1 else base
        return _lookup(".".join([*base, name[dots:]])) is not MISSING
    if _lookup(name) is not MISSING:
        return True
    if module is None:
        return False
    namespace = importlib.import_module(module)
    head, _, rest = name.partition(".")
    value = getattr(namespace, head, MISSING)
    if value is MISSING:
        value = getattr(builtins, head, MISSING)
    if value is not MISSING:
        for part in rest.split(".") if rest else []:
            value = getattr(value, part, MISSING)
            if value is MISSING:
                return False
        return True
    if head in importlib.import_module("torch_tfrecord").__all__:  # a public name: tt.<name>
        return _lookup(f"torch_tfrecord.{name}") is not MISSING
    # A bare method or attribute name, written in a class's docstring: some class of the module has
    # it, or sets it on its instances.
    classes = [value for value in vars(namespace).values() if inspect.isclass(value)]
    if any(hasattr(cls, name) or name in getattr(cls, "__annotations__", {}) for cls in classes):
        return True
    source = inspect.getsource(namespace)
    return "." not in name and re.search(rf"\bself\.{re.escape(name)}\s*[:=]", source) is not None


# Modules whose import needs an extra the dev extra cannot hold (apache-beam pins protobuf and pyarrow
# below the dev set's): their names are looked up only where that extra is installed.
GATED = {"torch_tfrecord.integrations.beam": "apache_beam"}


def _missing_extra(name: str | None) -> bool:
    """Whether ``name`` (a module, or a name in one) lies in a GATED module whose package is missing."""
    if name is None:
        return False
    name = "torch_tfrecord." + name[3:] if name.startswith("tt.") else name
    return any(
        (name == module or name.startswith(module + ".")) and importlib.util.find_spec(package) is None
        for module, package in GATED.items()
    )


def _docstring_references() -> list[tuple[str, str, bool]]:
    found = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = _module_name(path)
        if _missing_extra(module):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in ROLE.findall(node.value):
                    found.append((module, name.strip(), path.name == "__init__.py"))
    return found


def test_every_docstring_reference_resolves() -> None:
    references = _docstring_references()
    assert len(references) > 100  # the pattern finds them
    broken = sorted(
        {f"{module}: {name}" for module, name, package in references if not _resolve(name, module, package)}
    )
    assert broken == []


ROW = re.compile(r"^\| [^|]+ \| `([\w.]+)` \|")  # a row of docs/architecture.md's table of modules


def test_every_reference_in_the_docs_resolves() -> None:
    """Absolute names; in a row of the architecture page's table (a module's first docstring
    line), names relative to that row's module."""
    broken = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        for line in page.read_text(encoding="utf-8").splitlines():
            row = ROW.match(line)
            module = row.group(1) if row else None
            package = module is not None and (ROOT / module.replace(".", "/") / "__init__.py").exists()
            for name in ROLE.findall(line):
                if _missing_extra(module):
                    continue
                if not _resolve(name.strip(), module, package):
                    broken.append(f"{page.relative_to(ROOT)}: {name}")
    assert broken == []


@pytest.mark.parametrize(
    ("name", "module", "package", "resolves"),
    [
        ("torch_tfrecord.data.order.plan.EpochPlan", None, False, True),
        (".order.plan.EpochPlan", "torch_tfrecord.data.dataset", False, True),
        ("..errors.TFRecordError", "torch_tfrecord.data.dataset", False, True),
        (".epoch", "torch_tfrecord.data", True, True),
        ("_mixing", "torch_tfrecord.data.mix", False, False),  # a module that moved
        (".mixing.Schedule", "torch_tfrecord.data.mix", False, False),
        ("EpochPlan", "torch_tfrecord.data.dataset", False, True),
        ("tt.mix", None, False, True),
    ],
)
def test_the_resolver_tells_a_broken_reference(
    name: str, module: str | None, package: bool, resolves: bool
) -> None:
    assert _resolve(name, module, package) is resolves
