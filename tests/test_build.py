"""The package installs and decodes on a machine without a C compiler (protobuf fallback)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_IMPORT_FROM_TARGET = """
import sys, warnings
# Leave out the development checkout's editable-install finder: import the copy under test.
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
import torch, torch_tfrecord as tt
assert tt.__file__.startswith(sys.argv[1]), tt.__file__
assert tt.native._native is None
record = tt.encode_example({"a": [1, 2]})
for _ in range(3):
    assert tt.decode_batch([record], {"a": tt.FixedLen((2,), torch.int64)})["a"].tolist() == [[1, 2]]
print(tt.native.decoder())
from importlib import metadata
from torch_tfrecord.support.extras import install_hint
assert "vision" in metadata.metadata("torch-tfrecord").get_all("Provides-Extra")
print(install_hint("vision"))
"""


def clean_copy(source: Path, destination: Path) -> Path:
    """A copy of ``source`` without what its .gitignore leaves out: no build/ folder, *.so or
    *.egg-info from an earlier build, which setuptools would reuse instead of compiling."""
    ignored = [line.strip().rstrip("/") for line in (source / ".gitignore").read_text().splitlines()]
    patterns = [pattern for pattern in ignored if pattern and not pattern.startswith("#")]
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns(".git", *patterns))
    return destination


def test_clean_copy_leaves_out_build_outputs(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / ".gitignore", checkout)
    for leftover in ("build/temp/_native.o", "pkg/_native.so", "x.egg-info/PKG-INFO", ".git/HEAD"):
        (checkout / leftover).parent.mkdir(parents=True, exist_ok=True)
        (checkout / leftover).write_text("")
    (checkout / "pkg" / "_native.c").write_text("")
    copy = clean_copy(checkout, tmp_path / "copy")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == [".gitignore", "pkg", "pkg/_native.c"]


def test_installs_without_a_compiler_and_decodes_with_protobuf(tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = {**os.environ, "CC": "/bin/false", "PIP_NO_INDEX": "1"}
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--target", str(target), str(clean_copy(ROOT, tmp_path / "source"))],
        check=True,
        env=env,
        capture_output=True,
    )
    assert not list((target / "torch_tfrecord").glob("_native*.so")), "the extension was built after all"
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_FROM_TARGET, str(target)],
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    source = tmp_path / "source"
    # Installed from a folder, not from an index: the hint for a missing extra installs from there.
    assert result.stdout.splitlines() == [
        "python",
        f"install the 'vision' extra: pip install '{source}[vision]'",
    ]
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and "the native decoder is not built" in warnings[0], result.stderr
