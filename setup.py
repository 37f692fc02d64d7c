"""Builds the optional native extensions; everything else is in pyproject.toml.

Both are optional: without a C compiler the install still succeeds and the library decodes with
the protobuf runtime (torch_tfrecord warns once when it does). The region-of-interest JPEG decoder
(``torch_tfrecord.codec._jpeg``) is built where libjpeg's header is found (Debian/Ubuntu:
``apt-get install libjpeg62-turbo-dev``; ``JPEG_INCLUDE_DIR`` / ``JPEG_LIB_DIR`` point elsewhere);
without it, crops decode the whole image at a reduced scale, with the same pixels, more slowly.
"""

import os
import sys

from setuptools import Extension, setup

FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]


def _jpeg_include_dir() -> str | None:
    """Where jpeglib.h is: ``JPEG_INCLUDE_DIR``, the environment's prefix (conda), or the usual places.

    Only libjpeg-turbo (>= 1.5) has the cropping decode; another libjpeg fails to compile, and the
    extension, being optional, is then left out."""
    candidates = [
        os.environ.get("JPEG_INCLUDE_DIR", ""),
        os.path.join(sys.prefix, "include"),
        "/usr/include",
        "/usr/local/include",
        "/opt/homebrew/include",
        "/opt/homebrew/opt/jpeg-turbo/include",
    ]
    return next((d for d in candidates if d and os.path.exists(os.path.join(d, "jpeglib.h"))), None)


extensions = [
    Extension(
        "torch_tfrecord.support._native",
        sources=["torch_tfrecord/support/_native.c"],
        extra_compile_args=FLAGS,
        optional=True,
    )
]
jpeg_include = _jpeg_include_dir()
if jpeg_include is not None:
    library_dirs = [os.environ["JPEG_LIB_DIR"]] if os.environ.get("JPEG_LIB_DIR") else []
    extensions.append(
        Extension(
            "torch_tfrecord.codec._jpeg",
            sources=["torch_tfrecord/codec/_jpeg.c", "torch_tfrecord/codec/_resize.c"],
            depends=["torch_tfrecord/codec/_resize.h"],
            include_dirs=[] if jpeg_include == "/usr/include" else [jpeg_include],
            library_dirs=library_dirs,
            libraries=["jpeg", "pthread"],
            extra_compile_args=[*FLAGS, "-D_GNU_SOURCE"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
