"""CI: builds the sdist and the wheel, checks what they hold, and installs the wheel into a scratch venv.

    python .ci/check_dist.py

It builds from a copy of the files git tracks (or would: untracked, not ignored): an earlier
build's leftovers in the checkout (build/, *.egg-info/SOURCES.txt) would otherwise slip files
into the archives that the configuration leaves out. The wheel is built from the sdist
(``python -m build`` does that), so a file the sdist lacks fails as a user's source install
would. No build isolation: the installed setuptools builds (the dev extra has it), so nothing
is downloaded. The venv sees the system's packages (torch, numpy, ...) and gets the wheel with
``--no-deps``. A second venv gets the sdist with no C compiler (CC=/bin/false): it installs and
decodes on the slower paths (the portable wheels of packaging/build_wheels.sh are checked by
tests/test_wheel.py).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WHEEL_FILES = [
    "torch_tfrecord/__init__.py",
    "torch_tfrecord/__init__.pyi",  # the table of public names, read at import
    "torch_tfrecord/py.typed",
    "torch_tfrecord/support/_native.*.so",  # CI has a compiler: a wheel without the native decoder is a bug
    "torch_tfrecord/codec/_jpeg.*.so",  # and libjpeg's header (.ci/run): without it, no region decoding
    "torch_tfrecord/proto/example.proto",
    "torch_tfrecord/proto/feature.proto",
    "torch_tfrecord/proto/example_pb2.py",
    "torch_tfrecord/proto/example_pb2.pyi",
    "torch_tfrecord/convert/__init__.py",
    # the viewer's page: `torch-tfrecord view` serves these from the package, never from elsewhere
    "torch_tfrecord/viewer/static/index.html",
    "torch_tfrecord/viewer/static/viewer.js",
    "torch_tfrecord/viewer/static/viewer.css",
    "index_tools/__init__.py",
    "index_tools/cli.py",
    "torch_tfrecord-*.dist-info/licenses/LICENSE",
    "torch_tfrecord-*.dist-info/entry_points.txt",
]
SDIST_FILES = [
    "setup.py",  # declares the extension: without it a source install compiles nothing
    "pyproject.toml",
    "README.md",
    "LICENSE",
    # the extensions' C files, each in its layer's folder (setup.py's NATIVE_SOURCES, JPEG_SOURCES)
    "torch_tfrecord/_native_module.c",
    "torch_tfrecord/support/_native.h",
    "torch_tfrecord/support/_cpu.h",
    "torch_tfrecord/records/_framing.c",
    "torch_tfrecord/records/_gather.h",
    "torch_tfrecord/codec/_wire.c",
    "torch_tfrecord/data/order/_permutation.c",
    "torch_tfrecord/codec/_jpeg.c",
    "torch_tfrecord/codec/_resize.h",
    "packaging/extension.map",  # setup.py's version script for a static libjpeg
    "torch_tfrecord/py.typed",
    "torch_tfrecord/__init__.pyi",
    "torch_tfrecord/proto/feature.proto",
    "torch_tfrecord/viewer/static/viewer.js",
    "index_tools/build.py",
]
NOWHERE = ["tests/*", "build/*", "*__pycache__*", "*.pyc"]  # setuptools adds *.egg-info/ to any sdist

# The sdist installed where there is no C compiler: it installs, and decodes on the slower path.
NO_COMPILER_CHECK = """
import sys, warnings, torch, torch_tfrecord as tt
assert tt.__file__.startswith(sys.prefix), (tt.__file__, sys.prefix)
from torch_tfrecord.codec import native, image_roi
assert native.decoder() == "python" and not image_roi.available()
record = tt.encode_example({"a": [1, 2]})
assert tt.decode_batch([record], {"a": tt.FixedLen((2,), torch.int64)})["a"].tolist() == [[1, 2]]
"""

IMPORT_CHECK = """
import sys, torch, torch_tfrecord as tt, index_tools
assert tt.__file__.startswith(sys.prefix), (tt.__file__, sys.prefix)
assert index_tools.__file__.startswith(sys.prefix), index_tools.__file__
from torch_tfrecord.codec import native
assert native.decoder() == "native", native.decoder()
record = tt.encode_example({"a": [1, 2]})
assert tt.decode_batch([record], {"a": tt.FixedLen((2,), torch.int64)})["a"].tolist() == [[1, 2]]
"""


def check_names(archive: str, names: list[str], required: list[str]) -> list[str]:
    """What is wrong with an archive's file names: a required pattern unmatched, a forbidden one matched."""
    problems = [f"{archive}: nothing matches {p}" for p in required if not fnmatch.filter(names, p)]
    problems += [f"{archive}: holds {n}" for p in NOWHERE for n in fnmatch.filter(names, p)]
    return problems


def source_copy(destination: Path) -> Path:
    """The checkout's files as git lists them (tracked, and untracked but not ignored), copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # not a file deleted since the last commit
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(map(str, command)), flush=True)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-5000:], result.stderr[-5000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"exit status {result.returncode}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="check-dist-") as scratch:
        dist = Path(scratch) / "dist"
        source = source_copy(Path(scratch) / "source")
        run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source)
        (wheel,) = dist.glob("*.whl")
        (sdist,) = dist.glob("*.tar.gz")
        with zipfile.ZipFile(wheel) as archive:
            wheel_names = archive.namelist()
            metadata = archive.read(fnmatch.filter(wheel_names, "*.dist-info/METADATA")[0]).decode()
            entry_points = archive.read(
                fnmatch.filter(wheel_names, "*.dist-info/entry_points.txt")[0]
            ).decode()
        with tarfile.open(sdist) as archive:
            # Names without the top folder (torch_tfrecord-0.1.0/).
            sdist_names = [name.partition("/")[2] for name in archive.getnames()]
        problems = check_names(wheel.name, wheel_names, WHEEL_FILES)
        problems += check_names(sdist.name, sdist_names, SDIST_FILES)
        if "License-Expression: Apache-2.0" not in metadata.splitlines():
            problems.append(f"{wheel.name}: METADATA has no License-Expression: Apache-2.0")
        for script in ("torch-tfrecord = torch_tfrecord.cli:main", "tfrecord-index = index_tools.cli:main"):
            if script not in entry_points.splitlines():
                problems.append(f"{wheel.name}: no console script {script}")
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1

        venv = Path(scratch) / "venv"
        run(sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv)
        python = venv / "bin" / "python"
        run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel)
        run(python, "-c", IMPORT_CHECK, cwd=Path(scratch))  # not the checkout: it would shadow the wheel
        for command in ("torch-tfrecord", "tfrecord-index"):
            run(venv / "bin" / command, "--help", cwd=Path(scratch))
        run(venv / "bin" / "torch-tfrecord", "doctor", cwd=Path(scratch))

        bare = Path(scratch) / "no-compiler"
        run(sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", bare)
        no_compiler = {**os.environ, "CC": "/bin/false", "LDSHARED": "/bin/false", "PIP_NO_INDEX": "1"}
        bare_python = bare / "bin" / "python"
        pip = [bare_python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        run(*pip, sdist, env=no_compiler)
        run(bare_python, "-W", "ignore::RuntimeWarning", "-c", NO_COMPILER_CHECK, cwd=Path(scratch))
        sizes = {path.name: path.stat().st_size for path in (wheel, sdist)}
        print("ok:", ", ".join(f"{name} ({size:,} bytes)" for name, size in sizes.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
