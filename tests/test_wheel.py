"""The portable wheel, built by packaging/build_wheels.sh for the running Python, installed into a fresh
venv (not the checkout's environment: it cannot see the editable install) whose PATH has no C
compiler: the native decoder, the region-of-interest JPEG decoder and the native resize are the
wheel's and in use, and a few hundred records and JPEGs read through every native path give the
same records, tensors and pixels as the editable build.

The wheel is built with zig cc against glibc 2.17 and a libjpeg-turbo that is not the system's, from
the sdist; the venv gets torch (pip: a local wheel where one lies, else the index), Pillow and
simplejpeg. Skipped only where the build cannot run: a CPU other than x86_64 / aarch64, or no way to
get libjpeg-turbo's static library (no apt-get and no JPEG_PREFIX_<arch>).
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import torch_tfrecord as tt

ROOT = Path(__file__).resolve().parent.parent
ARCH = platform.machine()
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
RECORDS = 300
JPEGS = 150

pytestmark = [
    pytest.mark.skipif(ARCH not in ("x86_64", "aarch64"), reason=f"no portable wheel for {ARCH}"),
    pytest.mark.skipif(
        shutil.which("apt-get") is None and not os.environ.get(f"JPEG_PREFIX_{ARCH}"),
        reason=f"libjpeg-turbo's static library: no apt-get to fetch Debian's, and no JPEG_PREFIX_{ARCH}",
    ),
]


def _run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, **options)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    env = {
        **os.environ,
        "PYTHONS": VERSION,
        "ARCHS": ARCH,
        "WHEELHOUSE": str(out),
        f"PYTHON_{VERSION.replace('.', '_')}": sys.executable,
    }
    done = _run(["bash", str(ROOT / "packaging" / "build_wheels.sh")], env=env, timeout=540)
    (built,) = out.glob(f"torch_tfrecord-*-{TAG}-{TAG}-*manylinux*_{ARCH}.whl")
    tags = built.name.split("-")[-1]
    assert "manylinux_2_17" in tags or "manylinux_2_12" in tags or "manylinux_2_5" in tags, built.name
    shown = " ".join(done.stdout.split())  # auditwheel show: what the wheel needs from the system
    assert "is consistent with the following platform tag" in shown, done.stdout
    assert "libjpeg" not in shown, done.stdout
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel, torch, Pillow and simplejpeg, installed
    with a PATH that has no compiler."""
    folder = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", str(folder)], timeout=120)
    torch_version = torch.__version__.split("+")[0]
    # Nothing of the checkout's: with it on PYTHONPATH pip would take the package as installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "CC")}
    env |= {"PATH": str(folder / "bin"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--only-binary", ":all:"]
    _run([*pip, f"torch=={torch_version}", "pillow", "simplejpeg", str(wheel)], env=env, timeout=540)
    installed = _run([str(folder / "bin" / "python"), "-I", "-m", "pip", "show", "torch-tfrecord"], env=env)
    assert f"Location: {folder}" in installed.stdout, installed.stdout
    return folder


def _write_data(folder: Path) -> None:
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(0)
    with tt.ShardedExampleWriter(str(folder / "records"), max_records=RECORDS // 3 + 1) as writer:
        for i in range(RECORDS):
            tags = rng.integers(-(2**40), 2**40, int(rng.integers(0, 6))).tolist()
            example = {
                "id": i,
                "score": rng.random(2).astype(np.float32).tolist(),
                "tags": tags,
                "name": b"r%d" % i,
            }
            writer.write(tt.encode_example(example))
    with tt.ExampleWriter(str(folder / "images.tfrecord")) as images:
        for i in range(JPEGS):
            width, height = int(rng.integers(48, 400)), int(rng.integers(48, 300))
            y, x = np.mgrid[0:height, 0:width]
            pixels = np.stack([(x * (3 + c) + y * (i % 7) + c * 40) % 256 for c in range(3)], -1)
            pixels = (pixels + rng.normal(0, 12, pixels.shape)).clip(0, 255).astype(np.uint8)
            buffer = io.BytesIO()
            image = Image.fromarray(pixels)
            image = image.convert("L") if i % 9 == 0 else image
            subsampling = [0, 1, 2][i % 3]
            image.save(buffer, format="JPEG", quality=80, subsampling=subsampling, progressive=i % 5 == 0)
            images.write({"image": tt.BytesList([buffer.getvalue()]), "id": i})


def test_the_wheel_holds_both_extensions_and_no_library_beside_them(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith(".so")] == sorted(
        [
            f"torch_tfrecord/codec/_jpeg.cpython-{TAG[2:]}-{ARCH}-linux-gnu.so",
            f"torch_tfrecord/support/_native.cpython-{TAG[2:]}-{ARCH}-linux-gnu.so",
        ]
    )
    assert not [n for n in names if ".libs/" in n]  # nothing grafted by auditwheel: libjpeg is inside


def test_the_installed_wheel_reads_as_the_editable_build(venv: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write_data(data)
    script = str(ROOT / "tests" / "wheel_check.py")
    python = str(venv / "bin" / "python")
    assert (
        shutil.which("cc", path=str(venv / "bin")) is None
        and shutil.which("gcc", path=str(venv / "bin")) is None
    )
    bare = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CC", "TORCH_TFRECORD_DECODER")}
    # The wheel carries its own libjpeg-turbo: a machine's missing libraries (TORCH_TFRECORD_HIDE,
    # which the build from source below still honours) are nothing to it.
    wheel_env = {k: v for k, v in bare.items() if k != "TORCH_TFRECORD_HIDE"}
    installed = _run(
        [python, "-I", script, str(data), str(tmp_path / "wheel.pt")],
        env={**wheel_env, "PATH": str(venv / "bin")},
        cwd=tmp_path,
        timeout=300,
    )
    editable = _run(
        [sys.executable, script, str(data), str(tmp_path / "editable.pt")],
        env={**bare, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=300,
    )
    wheel_paths, editable_paths = json.loads(installed.stdout), json.loads(editable.stdout)
    site = str(venv)
    assert wheel_paths["package"].startswith(site), wheel_paths
    assert wheel_paths["native"].startswith(site) and wheel_paths["roi_jpeg"].startswith(site), wheel_paths
    assert wheel_paths["decoder"] == "native"
    assert editable_paths["native"].startswith(str(ROOT)), editable_paths
    # The CPU's features, as the build from source finds them (zig's runtime once said none).
    assert wheel_paths["hw_crc"] == editable_paths["hw_crc"]
    assert wheel_paths["permutation_avx512"] == editable_paths["permutation_avx512"]
    assert wheel_paths["native_resize"] == _has_avx2()
    if editable_paths["roi_jpeg"] is not None:
        assert wheel_paths["native_resize"] == editable_paths["native_resize"]
    ours = torch.load(tmp_path / "wheel.pt", weights_only=False)
    theirs = torch.load(tmp_path / "editable.pt", weights_only=False)
    assert len(ours["records"]["raw"]) == RECORDS and len(ours["images"]) == 12
    _same(ours["records"], theirs["records"], "records")
    for name, batches in ours["images"].items():
        if isinstance(theirs["images"][name], str):
            # A build without _jpeg (no libjpeg headers where it was built): TensorFlow's crops come
            # from PyTurboJPEG there, and it has no libturbojpeg; the wheel makes them itself.
            assert editable_paths["roi_jpeg"] is None and name.endswith("fast") and "-resize-" not in name
            continue
        _same(batches, theirs["images"][name], f"images/{name}")  # the same pixels as either path


def _has_avx2() -> bool:
    """Whether this CPU has AVX2 (the wheel's resize must run its AVX2 loops then)."""
    flags = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")]
    return bool(flags) and "avx2" in flags[0].split()


def _same(a: Any, b: Any, where: str) -> None:
    """Equal, tensors exactly (dtype, shape, every value)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, tt.Ragged):
        _same(a.values, b.values, f"{where}.values")
        _same(a.offsets, b.offsets, f"{where}.offsets")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
