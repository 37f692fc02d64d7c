"""``torch-tfrecord doctor``: one entry per fast path, and the loader's error for an extension that is
there but cannot load (which must never make ``import torch_tfrecord`` fail)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torch_tfrecord.cli import main
from torch_tfrecord.codec import image_roi
from torch_tfrecord.support import extension, optional

ROOT = Path(__file__).resolve().parent.parent
PATHS = {
    "native_decoder",
    "roi_jpeg",
    "native_resize",
    "simplejpeg",
    "turbojpeg",
    "rapidgzip",
    "fsspec_s3",
    "fsspec_gcs",
    "fsspec_http",
    "cuda_nvjpeg",
    "frameworks",
}


def doctor(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["doctor", *args]) == 0
    return out.getvalue()


def test_the_json_has_one_entry_per_path_as_this_process_sees_them() -> None:
    found = json.loads(doctor("--json"))
    assert set(found) == PATHS
    for name, path in found.items():
        assert set(path) == {"active", "why", "fix"}, name
        assert isinstance(path["active"], bool) and path["why"], name
    assert found["native_decoder"]["active"] == (extension.compiled is not None)
    assert found["roi_jpeg"]["active"] == image_roi.available()
    assert found["native_resize"]["active"] == image_roi.resizes_fast()
    for name in ("native_decoder", "roi_jpeg"):
        if name == "roi_jpeg" and optional.hidden("jpeg_ext"):  # TORCH_TFRECORD_HIDE: the fix is to unset it
            assert found[name]["fix"] == f"unset {optional.ENV_VAR}"
        elif not found[name]["active"]:
            assert "packaging/build_wheels.sh" in found[name]["fix"], name


def test_the_text_says_yes_or_no_and_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(extension.ENV_VAR, "python")
    lines = doctor().splitlines()
    assert {line.split()[0] for line in lines if not line.startswith(" ")} == PATHS
    if extension.compiled is not None:
        (native,) = [line for line in lines if line.startswith("native_decoder")]
        assert native.split()[1] == "no" and "TORCH_TFRECORD_DECODER=python turns it off" in native
        assert f"fix: unset {extension.ENV_VAR}" in lines[lines.index(native) + 1]


_BROKEN = """
import sys, warnings
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
warnings.simplefilter("always")
import torch, torch_tfrecord as tt
assert tt.__file__.startswith(sys.argv[1]), tt.__file__
record = tt.encode_example({"a": [1, 2]})
assert tt.decode_batch([record], {"a": tt.FixedLen((2,), torch.int64)})["a"].tolist() == [[1, 2]]
print(tt.native.decoder())
from torch_tfrecord.cli import main
main(["doctor", "--json"])
"""

_MISSING_SYMBOL = """extern int tt_symbol_nowhere(void);
int PyInit__native(void) { return tt_symbol_nowhere(); }
"""


def _broken_native(path: Path, scratch: Path) -> str:
    """Replaces the extension at ``path`` by one that cannot load; returns what its error says."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:  # a file that is no shared object at all
        path.write_bytes(b"not a shared object\n")
        return "invalid ELF header"
    source = scratch / "missing.c"
    source.write_text(_MISSING_SYMBOL)
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    return "undefined symbol: tt_symbol_nowhere"


def test_an_extension_that_cannot_load_falls_back_and_the_doctor_names_the_error(tmp_path: Path) -> None:
    """A copy of the package whose compiled modules are there but broken (a missing symbol, as a
    wheel for a newer glibc fails; a damaged file): it imports, decodes on the slower path with one
    warning, and the doctor prints the loader's error."""
    site = tmp_path / "site"
    package = site / "torch_tfrecord"
    shutil.copytree(ROOT / "torch_tfrecord", package, ignore=shutil.ignore_patterns("__pycache__"))
    suffix = f".cpython-{sys.version_info[0]}{sys.version_info[1]}-x86_64-linux-gnu.so"
    native = next((site / "torch_tfrecord" / "support").glob("_native*.so"), None)
    native = native or site / "torch_tfrecord" / "support" / f"_native{suffix}"
    expected = _broken_native(native, tmp_path)
    jpeg = next((site / "torch_tfrecord" / "codec").glob("_jpeg*.so"), None)
    jpeg = jpeg or site / "torch_tfrecord" / "codec" / f"_jpeg{suffix}"
    jpeg.write_bytes(b"\x7fELF but not really\n")
    result = subprocess.run(
        [sys.executable, "-c", _BROKEN, str(site)],
        # The copy's broken modules are the subject: nothing hidden on top (TORCH_TFRECORD_HIDE).
        env={
            **{k: v for k, v in os.environ.items() if k != optional.ENV_VAR},
            "PYTHONPATH": str(site),
            "TORCH_TFRECORD_DECODER": "auto",
        },
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    decoder, _, report = result.stdout.partition("\n")
    assert decoder == "python"
    warned = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warned) == 1 and "the native decoder cannot load" in warned[0], result.stderr
    assert expected in warned[0] and "torch-tfrecord doctor" in warned[0]
    found = json.loads(report)
    assert not found["native_decoder"]["active"] and expected in found["native_decoder"]["why"]
    assert not found["roi_jpeg"]["active"] and "cannot load" in found["roi_jpeg"]["why"]
    assert not found["native_resize"]["active"]
    assert "packaging/build_wheels.sh" in found["native_decoder"]["fix"]


def test_a_missing_jpeg_extension_warns_once_naming_the_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_roi, "compiled", None)
    monkeypatch.setattr(image_roi, "load_error", ModuleNotFoundError("No module named '_jpeg'"))
    monkeypatch.setattr(extension, "_warned", set())
    with pytest.warns(RuntimeWarning, match=r"_jpeg\) is not built; .*`torch-tfrecord doctor`") as caught:
        image_roi.warn_unavailable()
        image_roi.warn_unavailable()
    assert len(caught) == 1
    monkeypatch.setattr(image_roi, "load_error", None)  # switched off by a test: no warning
    monkeypatch.setattr(extension, "_warned", set())
    image_roi.warn_unavailable()
    assert extension._warned == set()
