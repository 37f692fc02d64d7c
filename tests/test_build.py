"""The package installs and decodes on a machine without a C compiler (protobuf fallback)."""

from __future__ import annotations

import os
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
"""


def test_installs_without_a_compiler_and_decodes_with_protobuf(tmp_path: Path) -> None:
    target = tmp_path / "site"
    env = {**os.environ, "CC": "/bin/false", "PIP_NO_INDEX": "1"}
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--target", str(target), str(ROOT)],
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
    assert result.stdout.strip() == "python"
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and "the native decoder is not built" in warnings[0], result.stderr
