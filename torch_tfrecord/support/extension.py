"""The compiled extension ``torch_tfrecord.support._native``, if it was built, and whether to use it.

``TORCH_TFRECORD_DECODER`` says: ``auto`` (default: the extension when it is built), ``native``
(an ImportError when it is not) or ``python`` (never). It governs the users of the extension
whose results could differ: the decoder (:mod:`torch_tfrecord.codec.native`) and the plain record
reader (:mod:`torch_tfrecord.records.scan`, and its reads by index entry,
:mod:`torch_tfrecord.records.entry_batches`). Those that compute the same values either way use it
whenever it is built: the shuffles' permutation (:mod:`torch_tfrecord.data.order.plan`, which tests
compare with its numpy twin) and the index parser (:mod:`torch_tfrecord.records.index`). This module
imports nothing heavy (the CLIs read without torch).

A compiled module that is there but cannot load (a wheel for a newer glibc, a missing symbol, a
damaged file) never makes ``import torch_tfrecord`` fail: :func:`load` gives None and the reason,
the library takes its slower path, warns once (:func:`warn_once`), and ``torch-tfrecord doctor``
names the error.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Literal

from . import optional

__all__ = [
    "DOCTOR",
    "ENV_VAR",
    "compiled",
    "for_reading",
    "load",
    "not_built",
    "requested",
    "unavailable",
    "warn_once",
]

ENV_VAR = "TORCH_TFRECORD_DECODER"
DOCTOR = "torch-tfrecord doctor"  # the command that says which fast paths an install has, and how to get them

_warned: set[str] = set()


def load(name: str) -> tuple[ModuleType | None, ImportError | None]:
    """The compiled module ``name``, or None and why: not built (a ``ModuleNotFoundError`` for
    ``name`` itself), or there but unloadable (the loader's ``ImportError``: a wrong glibc, a
    missing symbol, not a shared object for this machine)."""
    try:
        return importlib.import_module(name), None
    except ImportError as error:
        return None, error


def unavailable(error: ImportError | None) -> str:
    """Why a compiled module is missing, from :func:`load`'s error (None, or not found: not built;
    hidden by ``TORCH_TFRECORD_HIDE``: said so)."""
    if isinstance(error, ModuleNotFoundError) and error.name is not None:
        hiding = [name for name in optional.HIDDEN if error.name in optional.KNOWN[name].modules]
        if hiding:
            return f"is hidden ({optional.ENV_VAR} names {hiding[0]!r}: as if it were not built)"
    if error is None or isinstance(error, ModuleNotFoundError):
        return "is not built"
    return f"cannot load ({' '.join(str(error).split())})"


def warn_once(key: str, message: str) -> None:
    """A ``RuntimeWarning`` the first time ``key`` comes by in this process; the message is
    followed by the doctor's name."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"torch_tfrecord: {message} (`{DOCTOR}` says how to get it)", RuntimeWarning, stacklevel=3)


compiled: ModuleType | None
import_error: ImportError | None
compiled, import_error = load(__package__ + "._native")


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
        f"{ENV_VAR}=native, but torch_tfrecord.support._native {unavailable(import_error)}; "
        f"`{DOCTOR}` says how to get it"
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
