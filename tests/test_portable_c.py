"""The C sources compile without a warning (setup.py's flags plus ``-Werror``) with the compilers users
have: gcc and clang for this machine, and zig cc for the targets the wheels are built for and those
we cannot run here (aarch64 Linux, macOS on both CPUs, musl): a compile check, not a build.

A compiler that is missing is skipped with its name (zig cc comes with the dev extra's ``ziglang``);
``_jpeg.c`` needs libjpeg's headers (``libjpeg62-turbo-dev``, or ``JPEG_INCLUDE_DIR``) and is skipped
without them, naming them.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from native_sources import listed, sources

from torch_tfrecord.support import optional

# (compiler, target): None is this machine.
BUILDS = [
    ("gcc", None),
    ("clang", None),
    ("zig", "x86_64-linux-gnu.2.17"),
    ("zig", "aarch64-linux-gnu.2.17"),
    ("zig", "x86_64-linux-musl"),
    ("zig", "x86_64-macos"),
    ("zig", "aarch64-macos"),
]
JPEG_HEADERS = ("jpeglib.h", "jmorecfg.h", "jerror.h", "jconfig.h")


def _compiler(name: str) -> list[str] | None:
    if name != "zig":
        found = shutil.which(name)
        return [found] if found else None
    if os.environ.get("TORCH_TFRECORD_ZIG"):
        return [os.environ["TORCH_TFRECORD_ZIG"], "cc"]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    found = shutil.which("zig")
    return [found, "cc"] if found else None


def _jpeg_headers(folder: Path) -> Path | None:
    """libjpeg's four headers alone in ``folder`` (zig must not see the system's include folder,
    its libc is its own), from JPEG_INCLUDE_DIR or the system's; None where there are none."""
    places = [os.environ["JPEG_INCLUDE_DIR"]] if os.environ.get("JPEG_INCLUDE_DIR") else ["/usr/include"]
    places += [d for place in list(places) for d in glob.glob(os.path.join(place, "*-linux-gnu"))]
    folder.mkdir(exist_ok=True)
    for header in JPEG_HEADERS:
        found = next((Path(p) / header for p in places if (Path(p) / header).exists()), None)
        if found is None:
            return None
        shutil.copy(found, folder / header)
    return folder


@pytest.mark.parametrize("extension", ["native", "jpeg"])
@pytest.mark.parametrize(("name", "target"), BUILDS, ids=[f"{n}-{t or 'host'}" for n, t in BUILDS])
def test_the_c_sources_compile_without_a_warning(
    name: str, target: str | None, extension: str, tmp_path: Path
) -> None:
    compiler = _compiler(name)
    if compiler is None:
        pytest.skip(
            f"{name} not found" + (": pip install ziglang (the dev extra has it)" if name == "zig" else "")
        )
    files = sources("NATIVE_SOURCES" if extension == "native" else "JPEG_SOURCES")
    command = [
        *compiler,
        *(["-target", target] if target else []),
        "-c",
        "-fPIC",
        *listed("FLAGS"),
        "-Werror",
    ]
    command.append(f"-I{sysconfig.get_paths()['include']}")
    if extension == "jpeg":
        if optional.hidden("jpeg_ext"):
            pytest.skip(f"no libjpeg headers: {optional.why_hidden('jpeg_ext')}")
        headers = _jpeg_headers(tmp_path / "jpeg")
        if headers is None:
            pytest.skip(
                "no libjpeg headers (jpeglib.h: apt-get install libjpeg62-turbo-dev, or JPEG_INCLUDE_DIR)"
            )
        command.append(f"-I{headers}")
    running = [
        (source, subprocess.Popen([*command, str(source), "-o", str(tmp_path / f"{source.stem}.o")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for source in files
    ]  # fmt: skip
    failed = {}
    for source, process in running:
        output, _ = process.communicate(timeout=300)
        if process.returncode != 0 or output.strip():
            failed[source.name] = output[-2000:]
    assert failed == {}
    assert sorted(p.name for p in tmp_path.glob("*.o")) == sorted(f"{s.stem}.o" for s in files)
