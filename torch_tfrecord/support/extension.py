"""The compiled extension ``torch_tfrecord.support._native``, if it was built, and whether to use it.

``TORCH_TFRECORD_DECODER`` says: ``auto`` (default: the extension when it is built), ``native``
(an ImportError when it is not) or ``python`` (never). It governs the users of the extension
whose results could differ: the decoder (:mod:`torch_tfrecord.codec.native`) and the plain record
reader (:mod:`torch_tfrecord.records.scan`). Those that compute the same values either way use it
whenever it is built: the shuffles' permutation (:mod:`torch_tfrecord.data.order`, which tests
compare with its numpy twin) and the index parser (:mod:`torch_tfrecord.records.index`). This module
imports nothing heavy (the CLIs read without torch).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Literal

__all__ = ["ENV_VAR", "compiled", "for_reading", "not_built", "requested"]

ENV_VAR = "TORCH_TFRECORD_DECODER"

compiled: ModuleType | None
import_error: ImportError | None
try:
    from . import _native as compiled  # type: ignore[attr-defined, no-redef]
except ImportError as error:  # built without a C compiler
    compiled, import_error = None, error
else:
    import_error = None


def requested() -> Literal["auto", "native", "python"]:
    """What ``TORCH_TFRECORD_DECODER`` asks for.

    Raises:
        ValueError: the variable holds something else.
    """
    choice = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if choice not in ("auto", "native", "python"):
        raise ValueError(f"{ENV_VAR}={choice!r}: use 'auto', 'native' or 'python'")
    return choice  # type: ignore[return-value]


def not_built() -> ImportError:
    """The error for ``TORCH_TFRECORD_DECODER=native`` without the extension."""
    return ImportError(
        f"{ENV_VAR}=native, but torch_tfrecord.support._native is not built ({import_error}); reinstall "
        "torch-tfrecord from source on a machine with a C compiler"
    )


def for_reading() -> ModuleType | None:
    """The extension for the record reader: None when it is not built or turned off.

    Raises:
        ValueError, ImportError: as :func:`requested` and :func:`not_built`.
    """
    choice = requested()
    if choice == "python":
        return None
    if compiled is None and choice == "native":
        raise not_built()
    return compiled
