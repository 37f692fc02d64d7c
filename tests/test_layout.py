"""The package's import graph: no import cycles and no private name used across modules.

Read from the source (ASTs), imports inside functions included, so a cycle cannot hide behind a
lazy import: two modules that need each other are one concept split badly. A ``_private`` name
belongs to its module; other modules use what it exports (private *modules*, such as
``_assemble``, are the package's internals and may be imported by any module of the package).
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import layers
import native_sources
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch_tfrecord", "index_tools")


@dataclass
class Graph:
    """Modules by dotted name, the modules each imports, and private names used across modules."""

    files: dict[str, Path]
    modules: set[str]  # every importable module, compiled extensions included
    edges: dict[str, set[str]] = field(default_factory=dict)
    private_uses: list[str] = field(default_factory=list)


def _dotted(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _extension_name(path: Path, base: Path) -> str:
    """``pkg/_native.cpython-311-x86_64-linux-gnu.so``: ``pkg._native``."""
    stem = path.name.split(".", 1)[0]
    return ".".join([*path.parent.relative_to(base).parts, stem])


def _declared_extensions(base: Path) -> set[str]:
    """The compiled modules that ``base/setup.py`` declares (``Extension("pkg._native", ...)``):
    importable where they are built, and named here where they are not (no compiler)."""
    setup = base / "setup.py"
    if not setup.exists():
        return set()
    return {
        node.args[0].value
        for node in ast.walk(ast.parse(setup.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Extension"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def build_graph(base: Path, packages: tuple[str, ...]) -> Graph:
    files = {_dotted(p, base): p for package in packages for p in (base / package).rglob("*.py")}
    modules = set(files) | _declared_extensions(base)
    for package in packages:
        for pattern in ("*.so", "*.pyd"):
            modules |= {_extension_name(p, base) for p in (base / package).rglob(pattern)}
    graph = Graph(files, modules)
    for name, path in files.items():
        _scan(graph, name, path)
    return graph


def _scan(graph: Graph, name: str, path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    aliases: dict[str, str] = {}  # local name -> module of ours it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                origin = ".".join(
                    parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])
                )
            else:
                origin = node.module or ""
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                if submodule in graph.modules:
                    targets.add(submodule)
                    aliases[alias.asname or alias.name] = submodule
                elif origin in graph.modules:
                    targets.add(origin)
                    if alias.name.startswith("_") and origin != name:
                        graph.private_uses.append(f"{name}: from {origin} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in graph.modules:
                    targets.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and f"{aliases[node.value.id]}.{node.attr}" not in graph.modules
        ):
            graph.private_uses.append(f"{name}: {node.value.id}.{node.attr} (line {node.lineno})")
    graph.edges[name] = targets - {name}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(ROOT, PACKAGES)


def test_the_package_has_no_import_cycle(graph: Graph) -> None:
    assert graph.edges.get("torch_tfrecord.codec.decode")
    assert cycles(graph.edges) == []


def test_no_module_uses_another_modules_private_names(graph: Graph) -> None:
    assert graph.private_uses == []


def test_the_decoder_backends_meet_only_in_the_seam(graph: Graph) -> None:
    """decode picks a backend; the backends share assemble and never import decode or each other."""
    edges = graph.edges
    codec = "torch_tfrecord.codec"
    assert {f"{codec}.protobuf", f"{codec}.native"} <= edges[f"{codec}.decode"]
    for backend, other in (("protobuf", "native"), ("native", "protobuf")):
        assert f"{codec}.assemble" in edges[f"{codec}.{backend}"]
        assert not {f"{codec}.decode", f"{codec}.{other}"} & edges[f"{codec}.{backend}"]


def test_the_checks_catch_a_planted_cycle_and_private_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import run\n")
    (package / "a.py").write_text("def run():\n    from .b import _helper\n    return _helper()\n")
    (package / "b.py").write_text("from . import a, _ext\n\ndef _helper():\n    return a._secret, _ext.x\n")
    (package / "_ext.cpython-311-x86_64-linux-gnu.so").write_text("")
    planted = build_graph(tmp_path, ("pkg",))
    assert cycles(planted.edges) == [["pkg.a", "pkg.b"]]
    assert planted.private_uses == ["pkg.a: from pkg.b import _helper", "pkg.b: a._secret (line 4)"]


# The layers (tests/layers.py): folders by layer, imports downward only, modules that stay small.

LONGEST_MODULE = 450  # lines (Python modules)


def test_every_module_belongs_to_a_layer(graph: Graph) -> None:
    assert [m for m in graph.files if layers.group_of(m) is None] == []


def test_imports_run_downward_and_siblings_stay_apart(graph: Graph) -> None:
    """A module imports its own layer and those below, never above; data, vision and convert
    (one layer) do not import each other; nothing outside a subpackage imports its private
    modules (``_name``) or names."""
    wrong = []
    for module, targets in graph.edges.items():
        level, group = layers.group_of(module)  # type: ignore[misc]
        for target in targets:
            target_level, target_group = layers.group_of(target)  # type: ignore[misc]
            if target_level > level or (target_level == level and target_group != group):
                wrong.append(f"{module} ({group}) imports {target} ({target_group})")
            private = [part for part in target.split(".") if part.startswith("_") and part != "__init__"]
            home = target.rpartition(".")[0]
            if private and not (module == home or module.startswith(home + ".")) and level != layers.TOP:
                wrong.append(f"{module} imports the private module {target}")
    assert wrong == []


def test_the_datasets_folders_import_downward(graph: Graph) -> None:
    """Layer 3 is folders by concept (tests/layers.py ``DATA_SUBLAYERS``): each module is in one,
    and imports its own sub-layer and those below, never above."""
    wrong = []
    for module, targets in graph.edges.items():
        place = layers.data_sublayer(module)
        if place is None:
            continue
        if place[0] < 0:
            wrong.append(f"{module} is in no sub-layer of torch_tfrecord.data")
        for target in targets:
            target_place = layers.data_sublayer(target)
            if target_place is not None and target_place[0] > place[0]:
                wrong.append(f"{module} ({place[1]}) imports {target} ({target_place[1]})")
    assert wrong == []
    assert layers.data_sublayer("torch_tfrecord.data.order.plan") == (2, "order")
    assert layers.data_sublayer("torch_tfrecord.data.somewhere_new") == (-1, "none")


def test_the_checks_catch_an_import_from_above() -> None:
    assert layers.group_of("torch_tfrecord.records.reader") == (1, "records")
    assert layers.group_of("torch_tfrecord.data.dataset") == (3, "datasets")
    assert layers.group_of("torch_tfrecord.somewhere_new") is None


def test_modules_stay_under_the_length_limit(graph: Graph) -> None:
    long = {
        module: length
        for module, path in graph.files.items()
        if (length := len(path.read_text().splitlines())) >= LONGEST_MODULE
        and not path.name.endswith("_pb2.py")
    }
    assert long == {}


def test_the_architecture_page_shows_the_layers_as_they_are() -> None:
    assert layers.documented() == layers.table(), "run `python tests/layers.py` to rewrite the table"


def test_every_name_on_the_architecture_page_exists() -> None:
    """The path of a batch names real modules, classes and methods: a rename breaks this test."""
    text = layers.DOC.read_text()
    names = set(re.findall(r"`(torch_tfrecord(?:\.\w+)+)`", text.split(layers.BEGIN)[0]))
    assert len(names) > 15
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        for split in range(len(parts), 0, -1):
            try:
                value: object = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            try:
                for attribute in parts[split:]:
                    value = getattr(value, attribute)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert missing == []


# The C files: each part of the compiled extension sits in the folder of the layer that calls it
# (torch_tfrecord/support/_native.h), and includes headers of its own layer and below only.

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def include_errors(files: list[Path], group: Any) -> list[str]:
    """What is wrong with the ``#include "..."`` lines of C ``files`` (``group``: a file's layer):
    a header of a layer above, of a sibling group of the same layer, a .c file, or one missing."""
    wrong = []
    for path in files:
        level, name = group(path)
        for included in _INCLUDE.findall(path.read_text()):
            target = (path.parent / included).resolve()
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} includes {included}"
            if target.suffix != ".h" or not target.exists():
                wrong.append(f"{where}: not an existing header")
                continue
            target_level, target_name = group(target)
            if target_level > level or (target_level == level and target_name != name):
                wrong.append(f"{where} ({target_name}, above {name})")
    return wrong


def test_every_c_file_belongs_to_a_layer_and_to_a_build() -> None:
    files = layers.c_files()
    assert [p for p in files if layers.source_group(p) is None] == []
    built = {*native_sources.sources("NATIVE_SOURCES"), *native_sources.sources("JPEG_SOURCES")}
    assert {p for p in files if p.suffix == ".c"} == built  # no C file left out of setup.py, none missing


def test_c_files_include_their_own_layer_and_those_below_only() -> None:
    assert include_errors(layers.c_files(), layers.source_group) == []


def test_the_include_check_catches_an_include_from_above(tmp_path: Path) -> None:
    records = ROOT / "torch_tfrecord" / "records" / "_framing.c"
    upward = tmp_path / "upward.c"
    upward.write_text(f'#include "{ROOT / "torch_tfrecord" / "codec" / "_wire.h"}"\n#include <stdio.h>\n')
    sibling = tmp_path / "sibling.c"
    sibling.write_text(f'#include "{ROOT / "torch_tfrecord" / "data" / "order" / "_permutation.h"}"\n')
    source = tmp_path / "source.c"
    source.write_text(f'#include "{records}"\n')
    groups = {upward: (1, "records"), sibling: (3, "vision"), source: (2, "codec")}

    def group(path: Path) -> tuple[int, str] | None:
        return groups.get(path) or layers.source_group(path)

    found = include_errors([upward, sibling, source], group)
    assert [line.split(" includes ")[1] for line in found] == [
        f"{ROOT / 'torch_tfrecord' / 'codec' / '_wire.h'} (codec, above records)",
        f"{ROOT / 'torch_tfrecord' / 'data' / 'order' / '_permutation.h'} (datasets, above vision)",
        f"{records}: not an existing header",
    ]
