"""How a shard's records are read: decided once, as a frozen :class:`ShardSpec`; opened in each
process, as an :class:`OpenShard`.

A shard's stored bytes are local, remote (read by byte ranges) or remote through the node's cache;
a GZIP / ZLIB shard is inflated over any of them. What each shard is, is decided when a dataset is
built (:func:`shard_specs`: one look-up per remote shard, concurrently) and is the only thing about
it that is pickled to DataLoader workers; each process opens a spec into an open shard with one
interface (read ranges, read into a buffer, recover once from a damaged cached copy, close), one
implementation per kind. :func:`open_shard` is the one place that branches on the kind.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..errors import TFRecordError
from ..support.stages import CACHED, INFLATE, REMOTE, begin, count, end
from .compressed.index import CompressedIndex
from .compressed.shard import CompressedShard
from .io import StorageOptions, file_size, is_url, open_binary
from .listing import SourceListing
from .remote import RemoteFile, RequestCounter, file_info, for_each_path
from .remote.cache import ShardCache, cache_key
from .remote.cached import CachedFile, file_version

__all__ = [
    "BatchReadFailed",
    "LocalShard",
    "OpenShard",
    "Recovery",
    "ShardKind",
    "ShardSpec",
    "Storage",
    "open_shard",
    "shard_kind",
    "shard_specs",
]

logger = logging.getLogger(__name__)

ShardKind = Literal["local", "remote", "cached"]
"""Where a shard's stored bytes are read: a local file, a remote object by ranges, or a remote
object through the node's cache (fetched whole once per node, then read as a local file)."""
Int64Array = npt.NDArray[np.int64]


class BatchReadFailed(TFRecordError):
    """A batch read could not read every record whole (a file shorter than its index, a failed
    read): the per-record read then meets the cause and names the record."""


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """What a shard is, decided once when its dataset is built.

    Attributes:
        path: the file or URL.
        size: bytes of its record stream (a compressed shard's: uncompressed).
        kind: where its stored bytes are read (see :data:`ShardKind`).
        version: a remote object's ETag or generation ("" where there is none, or local).
        stored_size: bytes of the stored file (differs from ``size`` for a compressed shard).
        compressed: a GZIP / ZLIB shard's compressed index (its records are then inflated).
        manifest: the manifest that said the size and version, when they were not looked up
            (a remote shard is then checked against the store when it is first opened).
    """

    path: str
    size: int
    kind: ShardKind
    version: str = ""
    stored_size: int = -1
    compressed: CompressedIndex | None = dataclasses.field(default=None, compare=False, repr=False)
    manifest: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("local", "remote", "cached"):
            raise ValueError(f"kind={self.kind!r} must be 'local', 'remote' or 'cached'")
        if self.size < 0:
            raise ValueError(f"size={self.size} of {self.path!r} must be >= 0")
        if (self.kind == "local") == is_url(self.path):
            raise ValueError(f"{self.path!r} cannot be a {self.kind} shard")

    @property
    def inflating(self) -> bool:
        """Whether its records are inflated from a GZIP / ZLIB stream."""
        return self.compressed is not None


@dataclasses.dataclass
class Storage:
    """What the shards of one dataset share in a process: the file system's options, the node's
    cache, the count of remote requests, and the reader's place (for the cache's eviction order)."""

    storage_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    cache: ShardCache | None = None
    requests: RequestCounter = dataclasses.field(default_factory=RequestCounter)
    now: float = float("inf")

    def clock(self) -> float:
        return self.now


def shard_kind(path: str, cache: ShardCache | None) -> ShardKind:
    """What a shard is read as: a local file, a remote object read by ranges, or one fetched whole
    into the node's cache (the one place this is decided)."""
    return "local" if not is_url(path) else "cached" if cache is not None else "remote"


def shard_specs(
    paths: Sequence[str],
    compressed: Sequence[CompressedIndex | None],
    storage_options: StorageOptions = None,
    cache: ShardCache | None = None,
    listing: SourceListing | None = None,
) -> list[ShardSpec]:
    """Each shard's spec: its size (and, remote, version) from the listing of its sources, else
    looked up once, concurrently.

    A compressed shard needs no look-up unless it is cached (its index has its sizes).
    """
    found: dict[int, dict[str, Any]] = {}
    missing = []
    for i, path in enumerate(paths):
        if is_url(path) and (cache is not None or compressed[i] is None):
            info = None if listing is None else listing.info(path)
            if info is None:
                missing.append(i)
            else:
                found[i] = info
    infos = for_each_path(lambda path: file_info(path, storage_options), [paths[i] for i in missing])
    found.update(zip(missing, infos, strict=True))
    specs = []
    for i, path in enumerate(paths):
        index = compressed[i]
        info = found.get(i)
        stored = int(info["size"]) if info is not None else (-1 if is_url(path) else file_size(path))
        kind = shard_kind(path, cache)
        size = index.uncompressed_size if index is not None else stored
        version = file_version(info) if info is not None else ""
        specs.append(ShardSpec(path, size, kind, version, stored, index))
    return specs


class Recovery:
    """One read's way back from damage: nothing to do, for a source whose bytes are the data's own."""

    def again(self, error: TFRecordError) -> bool:
        """After ``error`` (damage, a stale entry) in what was read: whether reading again may
        give intact bytes; where not, ``error`` is the data's, left to raise."""
        return False


class OpenShard(ABC):
    """A shard opened in this process: byte ranges of its record stream.

    Failures are exceptions: :class:`~torch_tfrecord.errors.TFRecordError` subclasses for damage,
    a stale index or a store that fails, ``OSError`` for a local read that fails.
    """

    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec

    @abstractmethod
    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each ``[start, start + size)`` (a short one where the stream ends early)."""

    def read_into(self, offsets: Int64Array, sizes: Int64Array, buffer: bytearray, at: int) -> None:
        """Copies the ranges into ``buffer`` back to back from ``at``.

        Raises:
            BatchReadFailed: a range came back short or damaged.
        """
        try:
            pieces = self.read_ranges(offsets.tolist(), sizes.tolist())
        except TFRecordError as error:
            raise BatchReadFailed(str(error)) from error
        view = memoryview(buffer)
        for piece, size in zip(pieces, sizes.tolist(), strict=True):
            if len(piece) != size:
                raise BatchReadFailed(f"{self.spec.path!r} ended early, at byte {at + len(piece)}")
            view[at : at + size] = piece
            at += size

    def local(self) -> LocalShard | None:
        """The shard as a local file, if it is one now (a local shard, a remote one's complete
        cached copy): for the batch read of many shards in one native call."""
        return None

    def recovery(self) -> Recovery:
        """What one read of this source may do after damage in what it read (see :class:`Recovery`)."""
        return Recovery()

    def describe(self) -> str:
        """Where the bytes came from, for an error message (a cached copy's path)."""
        return repr(self.spec.path)

    @abstractmethod
    def close(self) -> None:
        """Lets go of what the source holds."""


class LocalShard(OpenShard):
    """A local file: a descriptor (positional reads, safe across threads and forks) and a
    read-only mapping (the native batch read copies records that lie apart from it)."""

    def __init__(self, spec: ShardSpec, path: str | None = None) -> None:
        super().__init__(spec)
        self.path = spec.path if path is None else path
        with open_binary(self.path) as handle:
            self.fd = os.dup(handle.fileno())
        try:
            self.mapping: mmap.mmap | None = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # an empty file, or one that cannot be mapped: read it
            self.mapping = None

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        return [os.pread(self.fd, size, start) for start, size in zip(starts, sizes, strict=True)]

    def read_into(self, offsets: Int64Array, sizes: Int64Array, buffer: bytearray, at: int) -> None:
        from .gather import read_into

        try:
            whole = read_into(self.fd, offsets, sizes, buffer, at)
        except OSError as error:
            raise BatchReadFailed(f"{self.path!r}: {error}") from error
        if whole != len(offsets):
            raise BatchReadFailed(f"{self.path!r} is shorter than its index says")

    def local(self) -> LocalShard:
        return self

    def describe(self) -> str:
        return repr(self.path)

    def close(self) -> None:
        mapping, self.mapping = self.mapping, None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:  # another thread's read holds it: unmapped when it lets go
                pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class RemoteShard(OpenShard):
    """A remote object, by byte ranges: neighbours merged, sequential reads ahead, retries."""

    def __init__(self, spec: ShardSpec, storage: Storage) -> None:
        super().__init__(spec)
        self.file = RemoteFile(spec.path, spec.stored_size, storage.storage_options, counter=storage.requests)
        if spec.manifest:
            from .manifest import check_remote_shard

            check_remote_shard(spec.manifest, spec.path, spec.stored_size, spec.version, self.file)

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        token = begin()
        pieces = self.file.read_ranges(starts, sizes)
        end(REMOTE, token, sum(sizes))
        return pieces

    def close(self) -> None:
        self.file.close()


class CachedShard(OpenShard):
    """A remote object through the node's cache: from the copy once it is complete, meanwhile from
    the download under way or the store (:class:`~torch_tfrecord.records.remote.cached.CachedFile`,
    which opens the copy for each read: safe from any thread). The native batch read reads the
    complete copy through :meth:`local`'s descriptor, in the thread that opened it."""

    def __init__(self, spec: ShardSpec, storage: Storage) -> None:
        super().__init__(spec)
        assert storage.cache is not None
        self.cache = storage.cache
        self.file = CachedFile(
            spec.path,
            spec.stored_size,
            spec.version,
            storage.storage_options,
            storage.cache,
            counter=storage.requests,
            now=storage.clock,
        )
        self._copy: LocalShard | None = None
        count(CACHED, 1)

    def local(self) -> LocalShard | None:
        if self._copy is None:
            path = self.file.local_path()
            if path is not None:
                try:
                    self._copy = LocalShard(self.spec, path)
                except FileNotFoundError:  # evicted since: read remotely until fetched again
                    return None
        return self._copy

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        token = None if self.local() is not None else begin()  # no complete copy: the store's wait
        pieces = self.file.read_ranges(starts, sizes)
        end(REMOTE, token, sum(sizes))
        return pieces

    def start(self) -> None:
        """Starts fetching the copy in the background (see :meth:`CachedFile.start`)."""
        self.file.start()

    def finish(self) -> None:
        self.file.finish()

    def fetching(self) -> bool:
        """Whether this process's download of the copy is queued or running."""
        return self.file.fetching()

    def complete(self) -> bool:
        """Whether the copy is complete in the cache."""
        return self._copy is not None or self.file.local_path() is not None

    def fetch(self) -> str | None:
        """The complete copy's path, fetched now if need be; None when the cache cannot take it."""
        return self.file.wait()

    def recovery(self) -> Recovery:
        return _CopyRecovery(self)

    def discard_copy(self) -> None:
        """Removes the copy (a damaged one), so that the next read fetches it again."""
        copy, self._copy = self._copy, None
        if copy is not None:
            copy.close()
        self.cache.discard(cache_key(self.spec.path))

    def close(self) -> None:
        copy, self._copy = self._copy, None
        if copy is not None:
            copy.close()
        self.file.close()


class _CopyRecovery(Recovery):
    """Read before the copy was complete: read again from the copy, once it is. Read from the copy:
    the copy is removed and fetched again, once; damage in the new copy is the data's (its message
    then says it was read from a copy fetched again)."""

    def __init__(self, source: CachedShard) -> None:
        self.source = source
        self.refetched = False

    def again(self, error: TFRecordError) -> bool:
        copy = self.source.file.local_path()
        if copy is None:
            return not self.refetched and self.source.fetch() is not None
        if self.refetched:
            error.args = (f"{error} (read from {copy!r}, its cached copy, fetched again once)",)
            return False
        logger.warning("%s: in the cached copy %r; fetching it again", error, copy)
        self.refetched = True
        self.source.discard_copy()
        return self.source.fetch() is not None


class InflatingShard(OpenShard):
    """A GZIP / ZLIB shard's record stream, inflated through its seek points, over a local file, a
    remote one's cached copy (waited for: inflating reads in order from a seek point), or the
    remote object itself."""

    def __init__(self, spec: ShardSpec, storage: Storage, window: int = 0) -> None:
        super().__init__(spec)
        assert spec.compressed is not None
        path, options = spec.path, None
        if spec.kind == "cached":
            token = begin()
            path = CachedShard(spec, storage).fetch() or spec.path
            end(REMOTE, token)
        if is_url(path):
            options = storage.storage_options
        self.shard = CompressedShard(path, spec.compressed, options)
        self.window = window

    @property
    def window(self) -> int:
        """Inflated bytes kept (a block shuffle's window)."""
        return self.shard.cache_bytes

    @window.setter
    def window(self, value: int) -> None:
        self.shard.cache_bytes = value

    def read_ranges(self, starts: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        token = begin()
        pieces = self.shard.read_ranges(starts, sizes)
        end(INFLATE, token)
        return pieces

    def read_into(self, offsets: Int64Array, sizes: Int64Array, buffer: bytearray, at: int) -> None:
        if len(offsets) and int((offsets + sizes).max()) > self.spec.size:
            raise BatchReadFailed(f"{self.spec.path!r}: a range past the end of its uncompressed stream")
        token = begin()
        try:
            self.shard.read_into(offsets, sizes, buffer, at)
        except TFRecordError as error:
            raise BatchReadFailed(str(error)) from error
        end(INFLATE, token)

    def close(self) -> None:
        self.shard.close()


def open_shard(spec: ShardSpec, storage: Storage, *, window: int = 0) -> OpenShard:
    """``spec`` opened in this process: the one place that branches on what a shard is.

    Args:
        spec: the shard.
        storage: what the dataset's shards share.
        window: a compressed shard's inflated bytes kept.

    Raises:
        FileNotFoundError: a local file that is gone.
    """
    if spec.inflating:
        return InflatingShard(spec, storage, window)
    if spec.kind == "local":
        return LocalShard(spec)
    if spec.kind == "cached":
        return CachedShard(spec, storage)
    return RemoteShard(spec, storage)
