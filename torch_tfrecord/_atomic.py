"""Atomic file creation: write under a temporary name, rename into place on success."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

from .io import PathLike

__all__ = ["atomic_write", "temporary_path"]


def temporary_path(path: PathLike) -> str:
    """A hidden name beside ``path`` (same directory, so the final rename is atomic)."""
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


@contextlib.contextmanager
def atomic_write(path: PathLike) -> Iterator[BinaryIO]:
    """Opens a temporary file for writing; renames it to ``path`` when the block succeeds.

    If the block raises, the temporary file is removed and ``path`` is left as it was.
    """
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as f:
            yield f
        os.replace(temporary, path)
    except BaseException:
        remove_quietly(temporary)
        raise
