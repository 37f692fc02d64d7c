"""Atomic file creation: write under a temporary name, rename into place on success.

For URLs the same promise rests on the object store: an upload becomes an object only when
it is committed (:class:`torch_tfrecord.records.remote.Upload`), so nothing half-written ever appears
under a final name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

from . import remote
from .io import PathLike, StorageOptions, is_url

__all__ = ["PendingFile", "atomic_write", "remove_quietly", "temporary_path"]

_BUFFER_SIZE = 1 << 20


def temporary_path(path: PathLike) -> str:
    """A hidden name beside ``path`` (same directory, so the final rename is atomic)."""
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def remove_quietly(path: str, storage_options: StorageOptions = None) -> None:
    if is_url(path):
        remote.remove(path, storage_options)
        return
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


class PendingFile:
    """A file being written that appears under its final name only when published.

    Locally: a temporary file beside the target, renamed on :meth:`publish`. For a URL: an
    upload to the target itself, committed on :meth:`publish` (``staged=False``), or, when the
    final name is not known yet, an upload to a temporary name that :meth:`publish` commits and
    then moves (a server-side copy on object stores).
    """

    def __init__(self, path: str, storage_options: StorageOptions = None, *, staged: bool = False) -> None:
        self.storage_options = storage_options
        self.remote = is_url(path)
        self.location = temporary_path(path) if staged or not self.remote else path
        self.stream: BinaryIO
        if self.remote:
            self.stream = remote.Upload(self.location, storage_options)  # type: ignore[assignment]
        else:
            self.stream = open(self.location, "wb", buffering=_BUFFER_SIZE)  # noqa: SIM115 (closed by the writer)

    def publish(self, path: str) -> None:
        """Makes the finished (closed) file appear under ``path``."""
        if not self.remote:
            os.replace(self.location, path)
            return
        self.stream.commit()  # type: ignore[attr-defined]
        if self.location != path:
            try:
                remote.move(self.location, path, self.storage_options)
            except BaseException:
                remove_quietly(self.location, self.storage_options)
                raise

    def discard(self) -> None:
        """Throws the file away; nothing appears under any final name."""
        if self.remote:
            self.stream.discard()  # type: ignore[attr-defined]
        else:
            remove_quietly(self.location)
