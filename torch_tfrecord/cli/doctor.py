"""``torch-tfrecord doctor [--json]``: which fast paths this install has, and for each that is
missing, why and the one command that brings it.

Every path is checked by loading what it needs here, in this interpreter: a compiled module that is
installed but cannot load (a wheel for a newer glibc, a missing symbol) shows the loader's error.
``--json`` prints one object, one key per path: ``{"active": bool, "why": str, "fix": str}``
(``fix`` is empty where nothing can bring it, or nothing needs to).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Any

from ..support import extension, optional
from ..support.extras import install_command
from .options import add_command

# The checks import torch and the image codecs when they run, never when the parser is built.

__all__ = ["FastPath", "add_doctor_command", "check"]


@dataclass(frozen=True)
class FastPath:
    """One fast path: whether this install takes it, why (or why not), and how to get it."""

    active: bool
    why: str
    fix: str = ""


def _wheel_fix() -> str:
    """The command that builds and installs this Python's portable wheel (both extensions)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    arch = platform.machine()
    return (
        f"PYTHONS={version} ARCHS={arch} bash packaging/build_wheels.sh && pip install --force-reinstall "
        f"--no-deps wheelhouse/torch_tfrecord-*-cp{version.replace('.', '')}-*{arch}.whl  (in a clone)"
    )


def _loaded_from(module: Any) -> str:
    return f"{module.__name__} from {getattr(module, '__file__', '?')}"


def _native_decoder() -> FastPath:
    compiled = extension.compiled
    if compiled is None:
        return FastPath(
            False,
            f"torch_tfrecord.support._native {extension.unavailable(extension.import_error)}: "
            "records decode with the protobuf runtime, several times slower",
            _wheel_fix(),
        )
    if os.environ.get(extension.ENV_VAR, "").strip().lower() == "python":
        return FastPath(False, f"{extension.ENV_VAR}=python turns it off", f"unset {extension.ENV_VAR}")
    crc = "the SSE4.2 instruction" if compiled.HW_CRC else "tables (this CPU has no SSE4.2 CRC32)"
    shuffle = (
        "eight values at a time (AVX-512)"
        if getattr(compiled, "PERMUTATION_AVX512", 0)
        else "one value at a time (this CPU has no AVX-512)"
    )
    return FastPath(True, f"{_loaded_from(compiled)}; CRC32C with {crc}; the shuffles' permutation {shuffle}")


def _roi_jpeg() -> FastPath:
    from ..codec import image_roi

    if image_roi.compiled is None:
        return FastPath(
            False,
            f"torch_tfrecord.codec._jpeg {extension.unavailable(image_roi.load_error)}: JPEGs "
            "decode whole at a reduced scale, about half as fast for random crops",
            f"unset {optional.ENV_VAR}" if optional.hidden("jpeg_ext") else _wheel_fix(),
        )
    return FastPath(True, f"{_loaded_from(image_roi.compiled)}: each JPEG's region only, a batch per call")


def _native_resize() -> FastPath:
    from ..codec import image_roi

    if image_roi.compiled is None:
        return FastPath(
            False,
            "it is part of torch_tfrecord.codec._jpeg (roi_jpeg), which is missing",
            f"unset {optional.ENV_VAR}" if optional.hidden("jpeg_ext") else _wheel_fix(),
        )
    if not image_roi.resizes_fast():
        return FastPath(False, "this CPU has no AVX2: torch resizes instead (the portable loops are slower)")
    return FastPath(True, "AVX2 loops: regions resized in the decoding threads, torch's pixels byte for byte")


def _module(name: str, what: str, extra: str) -> FastPath:
    """A Python package that a path needs, imported here (a binary one may fail to load)."""
    if optional.hidden(name):
        return FastPath(False, f"{optional.why_hidden(name)}: {what}", f"unset {optional.ENV_VAR}")
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        reason = "is not installed" if isinstance(error, ModuleNotFoundError) else f"cannot load ({error})"
        return FastPath(False, f"{name} {reason}: {what}", install_command(extra))
    version = getattr(module, "__version__", "")
    return FastPath(True, f"{name} {version}".rstrip() + f": {what}")


def _turbojpeg() -> FastPath:
    from ..codec import tf_jpeg

    what = "TensorFlow's decode_and_crop_jpeg pixels (dct='fast' crops) of CMYK JPEGs, of all without _jpeg"
    if optional.hidden("turbojpeg"):
        return FastPath(False, f"{optional.why_hidden('turbojpeg')}: {what}", f"unset {optional.ENV_VAR}")
    try:
        tf_jpeg.crop_library()
    except ImportError:
        if importlib.util.find_spec("turbojpeg") is None:
            return FastPath(False, f"PyTurboJPEG is not installed: {what}", install_command("fastjpeg"))
        return FastPath(
            False,
            f"PyTurboJPEG finds no libturbojpeg shared library: {what}",
            "apt-get install libturbojpeg0  (macOS: brew install jpeg-turbo)",
        )
    return FastPath(True, f"PyTurboJPEG with libturbojpeg: {what}")


def _fsspec(package: str, scheme: str) -> FastPath:
    what = f"{scheme} paths (ranged reads, the node cache)"
    if importlib.util.find_spec(package) is None:
        return FastPath(False, f"{package} is not installed: no {what}", install_command("remote"))
    return FastPath(True, f"{package} {importlib.metadata.version(package)}: {what}")


def _cuda_nvjpeg() -> FastPath:
    import torch

    if not torch.cuda.is_available():
        return FastPath(
            False,
            "no CUDA device (or a CPU build of torch): Image(device='cuda') is unavailable",
            "pip install torch torchvision  (a CUDA build, on a machine with an NVIDIA GPU)",
        )
    if importlib.util.find_spec("torchvision") is None:
        return FastPath(
            False,
            "torchvision is not installed: nvJPEG decodes through torchvision.io",
            install_command("vision"),
        )
    device = torch.cuda.get_device_name(0)
    return FastPath(True, f"CUDA {torch.version.cuda} on {device}: Image(device='cuda') decodes with nvJPEG")


def _frameworks() -> FastPath:
    from ..data.frameworks.detect import KNOWN_MAJORS

    found: list[str] = []
    unknown: list[str] = []
    for distribution, majors in KNOWN_MAJORS.values():
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        known = version.split(".", 1)[0].isdigit() and int(version.split(".", 1)[0]) in majors
        (found if known else unknown).append(f"{distribution} {version}")
    recognised = ", ".join(f"{d} {'/'.join(f'{m}.x' for m in majors)}" for d, majors in KNOWN_MAJORS.values())
    why = f"installed and recognised: {', '.join(found) or 'none'}"
    if unknown:
        why += f"; versions whose loader wrappers are not known (a warning when used): {', '.join(unknown)}"
    return FastPath(bool(found) and not unknown, f"{why} (recognised: {recognised})")


def check() -> dict[str, FastPath]:
    """Every fast path of this install, by name (the keys of ``--json``)."""
    return {
        "native_decoder": _native_decoder(),
        "roi_jpeg": _roi_jpeg(),
        "native_resize": _native_resize(),
        "simplejpeg": _module(
            "simplejpeg", "scaled JPEG decodes, TensorFlow's pixels (dct='fast')", "vision"
        ),
        "turbojpeg": _turbojpeg(),
        "rapidgzip": _module("rapidgzip", "seek points in GZIP / ZLIB shards' indexes", "compressed"),
        "fsspec_s3": _fsspec("s3fs", "s3://"),
        "fsspec_gcs": _fsspec("gcsfs", "gs://"),
        "fsspec_http": _fsspec("aiohttp", "https://"),
        "cuda_nvjpeg": _cuda_nvjpeg(),
        "frameworks": _frameworks(),
    }


def add_doctor_command(commands: Any) -> argparse.ArgumentParser:
    """Adds ``doctor`` to ``commands``; returns its parser."""
    parser = add_command(
        commands,
        "doctor",
        "which fast paths this install has (native decoder, JPEG regions, SIMD resize, ...) and how to get "
        "the missing ones",
        "torch-tfrecord doctor\ntorch-tfrecord doctor --json",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, one key per path")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    paths = check()
    if args.json:
        print(json.dumps({name: asdict(path) for name, path in paths.items()}, indent=2))
        return 0
    width = max(map(len, paths))
    for name, path in paths.items():
        print(f"{name:<{width}}  {'yes' if path.active else 'no '}  {path.why}")
        if not path.active and path.fix:
            print(f"{'':<{width}}       fix: {path.fix}")
    return 0
