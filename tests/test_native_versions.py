"""The extension compiles without a warning, and works, on every Python the package declares.

The package declares Python >= 3.10; the suite runs on one version (with torch). For the others
found on this machine (pyenv's 3.10, 3.12, 3.13, or ``TORCH_TFRECORD_PYTHONS``), this compiles
the extension's C files (setup.py's NATIVE_SOURCES) against their headers with setup.py's flags
plus ``-Werror``, loads the module in that interpreter and checks it with the standard library
alone (no torch, numpy or crc32c there): CRC32C against a bitwise reference, the plain reader's
framing, and decoding an Example. Versions not installed are skipped, not failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from native_sources import listed, sources

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.10", "3.12", "3.13")

_PATHS = "import sysconfig as s; print(s.get_paths()['include']); print(s.get_config_var('EXT_SUFFIX'))"

_SMOKE = r"""
import array, importlib.util, struct, sys
spec = importlib.util.spec_from_file_location("torch_tfrecord.support._native", sys.argv[1])
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def frame(payload):
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", crc32c(header)) + payload + struct.pack("<I", crc32c(payload))

for n in (0, 1, 7, 8, 9, 63, 1000):
    data = bytes((i * 37 + n) & 0xFF for i in range(n))
    assert native.masked_crc32c(data) == crc32c(data), n

payloads = [bytes([i]) * i for i in range(12)]
buffer = b"".join(frame(p) for p in payloads)
got, position = native.frame(buffer, 0, len(buffer), True)
assert got == payloads and position == len(buffer) and all(type(p) is bytes for p in got)
assert native.frame(buffer[:-1], 0, len(buffer), True) == (payloads[:-1], len(buffer) - 16 - 11)
damaged = bytearray(buffer); damaged[16 + 17 + 12] ^= 1  # record 2's payload
assert native.frame(bytes(damaged), 0, len(buffer), True) == (payloads[:2], 33)
assert native.frame(bytes(damaged), 0, len(buffer), False)[0][2] == b"\x03\x02"
assert native.frame(buffer, 16, 17, True) == ([b"\x01"], 33)

def ld(field, body):
    return bytes([field << 3 | 2, len(body)]) + body
values = ld(3, ld(1, bytes([5, 7])))  # Feature{int64_list{value: [5, 7]}}
example = ld(1, ld(1, ld(1, b"x") + ld(2, values)))  # Example{features{feature{"x": ...}}}
starts, lengths = array.array("q", [0]), array.array("q", [len(example)])
(status, rows, got_values, steps), = native.decode(example, starts, lengths, ((b"x", 3, 1, 2, 0, 0, None),))
assert list(memoryview(got_values).cast("q")) == [5, 7] and list(memoryview(rows).cast("q")) == [0, 2]
print("ok", sys.version.split()[0], native.HW_CRC)
"""


def _interpreters() -> dict[str, str]:
    named = os.environ.get("TORCH_TFRECORD_PYTHONS")
    if named:
        candidates = named.split(os.pathsep)
    else:
        pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
        candidates = [str(p / "bin" / "python") for p in sorted(pyenv.glob("3.*"))]
    found: dict[str, str] = {}
    for python in candidates:
        if not os.access(python, os.X_OK):
            continue
        version = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if version in VERSIONS:
            found.setdefault(version, python)
    return found


@pytest.fixture(scope="module")
def builds(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[str, Path, subprocess.CompletedProcess[str]]]:
    """Compiles the extension for every interpreter found, all at once."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("native-versions")
    running = {}
    for version, python in _interpreters().items():
        paths = subprocess.run(
            [python, "-c", _PATHS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        target = out / f"_native{paths[1]}"
        command = [compiler, "-shared", "-fPIC", *listed("FLAGS"), "-Werror", f"-I{paths[0]}"]
        command += [*map(str, sources("NATIVE_SOURCES")), "-o", str(target)]
        running[version] = (
            python,
            target,
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        )
    done = {}
    for version, (python, target, process) in running.items():
        output, _ = process.communicate(timeout=300)
        done[version] = (
            python,
            target,
            subprocess.CompletedProcess(process.args, process.returncode, output),
        )
    return done


@pytest.mark.parametrize("version", VERSIONS)
def test_the_extension_compiles_cleanly_and_works(
    version: str, builds: dict[str, tuple[str, Path, subprocess.CompletedProcess[str]]]
) -> None:
    if version not in builds:
        pytest.skip(f"no Python {version} on this machine (set TORCH_TFRECORD_PYTHONS to name one)")
    python, target, compiled = builds[version]
    assert compiled.returncode == 0 and not compiled.stdout.strip(), compiled.stdout
    result = subprocess.run([python, "-c", _SMOKE, str(target)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok {version}."), result.stdout
