"""Builds the optional native extensions; everything else is in pyproject.toml.

Both are optional: without a C compiler the install still succeeds and the library decodes with
the protobuf runtime (``torch-tfrecord doctor`` says what is missing and how to get it). The
region-of-interest JPEG decoder (``torch_tfrecord.codec._jpeg``) is built where libjpeg's header
is found (Debian/Ubuntu: ``apt-get install libjpeg62-turbo-dev``; ``JPEG_INCLUDE_DIR`` /
``JPEG_LIB_DIR`` point elsewhere); without it, crops decode the whole image at a reduced scale,
with the same pixels, more slowly.

The portable wheels (packaging/build_wheels.sh) set two more variables: ``JPEG_STATIC_LIB``, a
libjpeg-turbo ``libjpeg.a`` linked into ``_jpeg`` (no libjpeg needed where the wheel is
installed), and ``TORCH_TFRECORD_REQUIRE_EXTENSIONS=1``, which turns a failed extension build
into a failed build instead of a wheel without it.
"""

import os
import sys

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]

# torch_tfrecord.support._native: one module from one C file per concern, each in the folder of
# the layer that calls it (torch_tfrecord/support/_native.h says which is which).
NATIVE_SOURCES = [
    "torch_tfrecord/_native_module.c",
    "torch_tfrecord/support/_native_buffers.c",
    "torch_tfrecord/records/_framing.c",
    "torch_tfrecord/records/_index.c",
    "torch_tfrecord/records/_gather.c",
    "torch_tfrecord/codec/_wire.c",
    "torch_tfrecord/data/order/_permutation.c",
    "torch_tfrecord/data/transport/_byte_ring.c",
    "torch_tfrecord/data/grouping/_packing.c",
    "torch_tfrecord/data/select/_id_lookup.c",
]
NATIVE_HEADERS = [
    "torch_tfrecord/support/_native.h",
    "torch_tfrecord/support/_cpu.h",
    "torch_tfrecord/records/_framing.h",
    "torch_tfrecord/records/_index.h",
    "torch_tfrecord/records/_gather.h",
    "torch_tfrecord/codec/_wire.h",
    "torch_tfrecord/data/order/_permutation.h",
    "torch_tfrecord/data/transport/_byte_ring.h",
    "torch_tfrecord/data/grouping/_packing.h",
    "torch_tfrecord/data/select/_id_lookup.h",
]
JPEG_SOURCES = ["torch_tfrecord/codec/_jpeg.c", "torch_tfrecord/codec/_resize.c"]
JPEG_HEADERS = ["torch_tfrecord/codec/_resize.h", "torch_tfrecord/support/_cpu.h"]

EXPORTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "packaging", "extension.map")
REQUIRED = os.environ.get("TORCH_TFRECORD_REQUIRE_EXTENSIONS", "") not in ("", "0")


def _jpeg_include_dir() -> str | None:
    """Where jpeglib.h is: ``JPEG_INCLUDE_DIR``, the environment's prefix (conda), or the usual places.

    Only libjpeg-turbo (>= 1.5) has the cropping decode; another libjpeg fails to compile, and the
    extension, being optional, is then left out. ``JPEG_INCLUDE_DIR`` set to a folder without the
    header leaves the extension out (how a machine without libjpeg's headers is simulated)."""
    if "JPEG_INCLUDE_DIR" in os.environ:
        candidates = [os.environ["JPEG_INCLUDE_DIR"]]
    else:
        candidates = [
            os.path.join(sys.prefix, "include"),
            "/usr/include",
            "/usr/local/include",
            "/opt/homebrew/include",
            "/opt/homebrew/opt/jpeg-turbo/include",
        ]
    return next((d for d in candidates if d and os.path.exists(os.path.join(d, "jpeglib.h"))), None)


def _jpeg_extension(include: str) -> Extension:
    """``_jpeg``: linked against libjpeg (shared), or with ``JPEG_STATIC_LIB`` its static archive."""
    static = os.environ.get("JPEG_STATIC_LIB")
    hidden = bool(static) and sys.platform.startswith("linux")
    library_dirs = [os.environ["JPEG_LIB_DIR"]] if os.environ.get("JPEG_LIB_DIR") else []
    return Extension(
        "torch_tfrecord.codec._jpeg",
        sources=JPEG_SOURCES,
        depends=JPEG_HEADERS,
        include_dirs=[] if include == "/usr/include" else [include],
        library_dirs=[] if static else library_dirs,
        libraries=["pthread", "m"] if static else ["jpeg", "pthread", "m"],
        extra_objects=[static] if static else [],
        define_macros=[("TORCH_TFRECORD_STATIC_JPEG", "1")] if static else [],
        # libjpeg's symbols stay inside _jpeg (packaging/extension.map exports PyInit__jpeg only)
        extra_link_args=[f"-Wl,--version-script={EXPORTS}"] if hidden else [],
        extra_compile_args=FLAGS,
        optional=not REQUIRED,
    )


extensions = [
    Extension(
        "torch_tfrecord.support._native",
        sources=NATIVE_SOURCES,
        depends=NATIVE_HEADERS,
        extra_compile_args=FLAGS,
        optional=not REQUIRED,
    )
]
jpeg_include = _jpeg_include_dir()
if jpeg_include is not None:
    extensions.append(_jpeg_extension(jpeg_include))
elif REQUIRED:
    raise SystemExit("TORCH_TFRECORD_REQUIRE_EXTENSIONS: no jpeglib.h (set JPEG_INCLUDE_DIR)")

setup(ext_modules=extensions)
