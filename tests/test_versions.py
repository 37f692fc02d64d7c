"""An unsupported Python or torch gets one clear error at ``import torch_tfrecord`` that names the
supported range (torch_tfrecord.support.versions), never an AttributeError from deep inside; and
the range it checks is the one the compatibility matrix ran and pyproject.toml declares."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_tfrecord.errors import TFRecordError, UnsupportedVersionError
from torch_tfrecord.support import tested_versions, versions

ROOT = Path(__file__).resolve().parent.parent


def _import_after(setup: str, *, path: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``setup`` then ``import torch_tfrecord`` in a fresh interpreter."""
    pythonpath = os.pathsep.join([*(path or []), str(ROOT), os.environ.get("PYTHONPATH", "")])
    code = f"{setup}\nimport torch_tfrecord\nprint('imported')"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )  # fmt: skip


def test_an_old_torch_is_refused_at_import_naming_the_range() -> None:
    done = _import_after("import torch\ntorch.__version__ = '2.0.1+cu118'")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    floor, newest = tested_versions.TORCH
    assert last == (
        f"torch_tfrecord.errors.UnsupportedVersionError: torch_tfrecord needs torch >= {floor}, found "
        f"2.0.1+cu118 (supported: torch {floor} to {newest}): pip install 'torch>={floor}'"
    )
    assert "AttributeError" not in done.stderr


def test_an_old_torch_not_yet_imported_is_refused_without_importing_it(tmp_path: Path) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (fake / "version.py").write_text("__version__ = '1.13.1'\ndebug = False\n")
    done = _import_after("", path=[str(tmp_path)])
    assert done.returncode != 0
    assert f"torch_tfrecord needs torch >= {tested_versions.TORCH[0]}, found 1.13.1" in done.stderr
    assert "RuntimeError" not in done.stderr


def test_an_old_python_is_refused_at_import() -> None:
    done = _import_after("import sys\nsys.version_info = (3, 9, 18, 'final', 0)")
    assert done.returncode != 0
    oldest, newest = tested_versions.PYTHON
    expected = f"torch_tfrecord needs Python >= {oldest}, found 3.9 (supported: CPython {oldest} to {newest})"
    assert expected in done.stderr


def test_the_supported_ones_import() -> None:
    done = _import_after("import torch")
    assert done.stdout.strip() == "imported", done.stderr
    versions.check_torch(tested_versions.TORCH[0])
    versions.check_torch(tested_versions.TORCH[1] + "+cu130")
    versions.check_torch("99.0.0a0+git1234567")
    versions.check_torch(None)  # no torch to read: importing torch will say so
    versions.check_python(versions.release(tested_versions.PYTHON[0]))
    versions.check_python((*versions.release(tested_versions.PYTHON[1]), 0, "final", 0))


@pytest.mark.parametrize("version", ["2.0.1", "1.13.1+cpu", "not a version", ""])
def test_check_torch_refuses(version: str) -> None:
    with pytest.raises(UnsupportedVersionError, match="torch_tfrecord needs torch >= ") as raised:
        versions.check_torch(version)
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, TFRecordError)


def test_release() -> None:
    assert versions.release("2.1.0+cu121") == (2, 1, 0)
    assert versions.release("2.6.0a0+git5cf5d3a") == (2, 6, 0)
    assert versions.release("3.10") == (3, 10)
    assert versions.release("dev") == ()


def _trimmed(version: str) -> tuple[int, ...]:
    found = versions.release(version)
    while found and found[-1] == 0:
        found = found[:-1]
    return found


def test_the_declared_floors_are_the_checked_ones() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (no tomllib on Python 3.10)
    torch_floor = re.search(r'^\s*"torch>=([\d.]+)"', pyproject, re.MULTILINE)
    python_floor = re.search(r'^requires-python = ">=([\d.]+)"$', pyproject, re.MULTILINE)
    assert torch_floor and python_floor
    assert _trimmed(torch_floor[1]) == _trimmed(tested_versions.TORCH[0])
    assert python_floor[1] == tested_versions.PYTHON[0]
