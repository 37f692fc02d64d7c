"""TORCH_TFRECORD_HIDE (torch_tfrecord/support/optional.py): each optional library it names behaves as
absent, for the library and the tests alike; a name it does not know fails the import, naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_tfrecord.support import optional

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, hide: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, optional.ENV_VAR: hide, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_names_are_read_from_commas_or_spaces() -> None:
    assert optional.hidden_names("turbojpeg,chromium jpeg_ext") == {"turbojpeg", "chromium", "jpeg_ext"}
    assert optional.hidden_names("") == optional.hidden_names(None) == frozenset()
    assert optional.hidden_names(" , rapidgzip,, ") == {"rapidgzip"}


def test_an_unknown_name_is_refused_naming_it_and_the_known_ones() -> None:
    known = "known: chromium, java, jpeg_ext, rapidgzip, simplejpeg, turbojpeg"
    with pytest.raises(ValueError, match=rf"'turbo'.*{known}"):
        optional.hidden_names("turbojpeg,turbo")
    with pytest.raises(KeyError, match="'libjpeg' is not an optional library"):
        optional.hidden("libjpeg")


def test_an_unknown_name_fails_the_import_of_the_package() -> None:
    done = _python("import torch_tfrecord", "turbo-jpeg")
    assert done.returncode != 0
    assert "TORCH_TFRECORD_HIDE='turbo-jpeg' names 'turbo-jpeg'" in done.stderr


def test_hidden_libraries_are_absent_for_the_library_and_for_plain_imports() -> None:
    """With all four module-backed names hidden: each module imports as missing (a test's
    importorskip skips), the library takes its paths without them and says why, and the doctor
    names the variable as the reason and unsetting it as the fix."""
    code = """
import importlib, json
import torch_tfrecord
from torch_tfrecord.codec import image_roi, tf_jpeg
from torch_tfrecord.records.compressed import inflate
from torch_tfrecord.support import extension, optional
from torch_tfrecord.cli.doctor import check

missing = []
for name in ("simplejpeg", "turbojpeg", "rapidgzip", "torch_tfrecord.codec._jpeg"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        missing.append(name)
try:
    tf_jpeg.crop_library()
    crop = None
except ImportError as error:
    crop = str(error)
doctor = {k: [v.active, v.why, v.fix] for k, v in check().items()}
print(json.dumps({
    "missing": missing,
    "roi": [image_roi.available(), extension.unavailable(image_roi.load_error)],
    "simplejpeg": tf_jpeg.simplejpeg_module() is None,
    "rapidgzip": inflate.has_rapidgzip(),
    "crop": crop,
    "chromium": optional.hidden("chromium"),
    "doctor": doctor,
}))
"""
    done = _python(code, "turbojpeg,jpeg_ext,simplejpeg,rapidgzip")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["missing"] == ["simplejpeg", "turbojpeg", "rapidgzip", "torch_tfrecord.codec._jpeg"]
    why = "is hidden (TORCH_TFRECORD_HIDE names 'jpeg_ext': as if it were not built)"
    assert found["roi"] == [False, why]
    assert found["simplejpeg"] is True and found["rapidgzip"] is False and found["chromium"] is False
    assert "libturbojpeg shared library (TORCH_TFRECORD_HIDE hides it here)" in found["crop"]
    assert "fastjpeg" in found["crop"]  # what to install, as without the hiding
    for name in ("roi_jpeg", "native_resize", "simplejpeg", "turbojpeg", "rapidgzip"):
        active, why, fix = found["doctor"][name]
        assert not active and fix == "unset TORCH_TFRECORD_HIDE", (name, why, fix)
    assert found["doctor"]["native_decoder"][0] is True  # not named: untouched


def test_a_hidden_program_is_only_what_hidden_says() -> None:
    done = _python(
        "import sys, torch_tfrecord\nfrom torch_tfrecord.support import optional\n"
        "print(optional.hidden('chromium'), optional.hidden('turbojpeg'), 'simplejpeg' in sys.modules)",
        "chromium",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False"]  # a program hides no module
