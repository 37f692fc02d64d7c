"""The optional libraries a fast path or a test needs, and ``TORCH_TFRECORD_HIDE``, which hides them.

A user's machine may lack what the development machines have: the libturbojpeg shared library,
Debian's chromium, Java, libjpeg's headers when the package was built (no ``_jpeg`` extension), a pip
package of an extra. ``TORCH_TFRECORD_HIDE=turbojpeg,chromium,jpeg_ext`` makes each one named
behave as absent, for the library and the test suite alike, so that a machine with everything
installed runs the code paths (and the skips) of one without: CI runs the suite a second time
that way. Names that stand for Python modules hide them from ``import`` (the module is put in
``sys.modules`` as None, so importing it raises ``ModuleNotFoundError``, as a missing one would);
the others (programs) are asked with :func:`hidden`. Read once, when the package is imported; an
unknown name fails that import, naming the known ones, so a typo never hides nothing silently.
"""

from __future__ import annotations

import dataclasses
import os
import sys

__all__ = [
    "ENV_VAR",
    "HIDDEN",
    "KNOWN",
    "OptionalLibrary",
    "hidden",
    "hidden_names",
    "hide_modules",
    "why_hidden",
]

ENV_VAR = "TORCH_TFRECORD_HIDE"


@dataclasses.dataclass(frozen=True)
class OptionalLibrary:
    """One optional library: what it is, what needs it, and the Python modules that stand for it.

    Args:
        what: the library, as a person installing it would name it.
        needed_by: what uses it (a fast path, pixels, or tests).
        modules: the importable modules that are absent while it is hidden (none for a program).
    """

    what: str
    needed_by: str
    modules: tuple[str, ...] = ()


KNOWN: dict[str, OptionalLibrary] = {
    "chromium": OptionalLibrary(
        "Debian's chromium (/usr/bin/chromium)", "the viewer's browser tests and the docs' screenshot test"
    ),
    "java": OptionalLibrary(
        "a Java runtime, 17 or later (pyspark starts Spark's JVM with it)",
        "tt.spark, its tests and its guide",
    ),
    "jpeg_ext": OptionalLibrary(
        "the region-of-interest JPEG decoder torch_tfrecord.codec._jpeg (built where libjpeg's headers are)",
        "JPEG crops and resizes decoded region by region, with the SIMD resize",
        ("torch_tfrecord.codec._jpeg",),
    ),
    "rapidgzip": OptionalLibrary(
        "rapidgzip (the 'compressed' extra)", "seek points in GZIP / ZLIB shards' indexes", ("rapidgzip",)
    ),
    "simplejpeg": OptionalLibrary(
        "simplejpeg (the 'vision' and 'fastjpeg' extras)",
        "scaled JPEG decodes and TensorFlow's JPEG pixels (dct='fast')",
        ("simplejpeg",),
    ),
    "turbojpeg": OptionalLibrary(
        "PyTurboJPEG with the libturbojpeg shared library (apt-get install libturbojpeg0)",
        "TensorFlow's decode_and_crop_jpeg pixels of CMYK JPEGs, and of every JPEG without _jpeg",
        ("turbojpeg",),
    ),
}


def hidden_names(value: str | None) -> frozenset[str]:
    """The names in a ``TORCH_TFRECORD_HIDE`` value (comma- or space-separated).

    Raises:
        ValueError: a name that is not one of :data:`KNOWN` (the message lists them).
    """
    names = frozenset(name for name in (value or "").replace(",", " ").split())
    unknown = sorted(names - KNOWN.keys())
    if unknown:
        raise ValueError(
            f"{ENV_VAR}={value!r} names {', '.join(map(repr, unknown))}, which is not an optional library "
            f"the project knows; known: {', '.join(sorted(KNOWN))}"
        )
    return names


HIDDEN: frozenset[str] = hidden_names(os.environ.get(ENV_VAR))
"""What this process hides (read when the package was imported)."""


def hidden(name: str) -> bool:
    """Whether ``name`` (a key of :data:`KNOWN`) is hidden in this process.

    Raises:
        KeyError: ``name`` is not a known optional library (a typo in the caller).
    """
    if name not in KNOWN:
        known = ", ".join(sorted(KNOWN))
        raise KeyError(f"{name!r} is not an optional library the project knows; known: {known}")
    return name in HIDDEN


def why_hidden(name: str) -> str:
    """What a hidden library is, and that ``TORCH_TFRECORD_HIDE`` hides it (for messages)."""
    return f"{KNOWN[name].what}, which {ENV_VAR}={os.environ.get(ENV_VAR, '')} hides"


def hide_modules() -> None:
    """Makes the modules of every hidden library import as missing, in this process from now on."""
    for name in HIDDEN:
        for module in KNOWN[name].modules:
            sys.modules[module] = None  # type: ignore[assignment]  # what `import` reads as "not there"


hide_modules()
