"""Writing remote objects so that they appear whole or not at all (:class:`Upload`)."""

from __future__ import annotations

import contextlib
import logging
import tempfile
from typing import Any

from .retry import retrying
from .urls import StorageOptions, filesystem

__all__ = ["Upload"]

logger = logging.getLogger(__name__)


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


class Upload:
    """A write-only stream to an object that appears under its name only on :meth:`commit`.

    Uses fsspec's transactional files (``autocommit=False``): on S3 a multipart upload that
    is completed at commit and aborted on :meth:`discard`, on GCS a resumable upload, locally
    a temporary file. A process that dies mid-write leaves no object under the name.
    """

    def __init__(self, url: str, storage_options: StorageOptions = None) -> None:
        self.url = url
        fs, path = filesystem(url, storage_options)
        self._spool: tuple[Any, str] | None = None
        self._file: Any
        if "memory" in _protocols(fs):
            # Its files are live from the moment they open: spool, and put the bytes on commit.
            self._spool = (fs, path)
            self._file = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 (closed on commit)
        else:
            self._file = retrying(lambda: fs.open(path, "wb", autocommit=False), url, "opening for writing")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return int(self._file.write(data))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Uploads what is buffered; the object still does not exist until :meth:`commit`."""
        if self._spool is None:
            self._file.close()

    def commit(self) -> None:
        if self._spool is None:
            self._file.commit()
            return
        fs, path = self._spool
        self._file.seek(0)
        data = self._file.read()
        self._file.close()
        retrying(lambda: fs.pipe_file(path, data), self.url, "writing")

    def discard(self) -> None:
        """Abandons the upload (an S3 multipart upload is aborted); a failure here is only logged,
        as the upload then never completes and the object never appears."""
        if self._spool is not None:
            self._file.close()
            return
        try:
            self._file.discard()
        except Exception as error:
            logger.warning("could not abort the upload to %r: %s", self.url, error)
        finally:
            with contextlib.suppress(AttributeError):  # (memory files have no such flag, nor need it)
                self._file.closed = True  # so that garbage collection never commits it
