"""Remote storage through fsspec: URLs, retries, ranged and coalesced reads, read-ahead, uploads.

- :mod:`.urls`: which paths are remote, their file system, whole-object operations;
- :mod:`.retry`: transient failures retried with backoff (:class:`RetryPolicy`);
- :mod:`.ranged`: :class:`RemoteFile`, byte ranges with merged requests and read-ahead;
- :mod:`.upload`: :class:`Upload`, objects that appear only when committed.
"""

from .ranged import RemoteFile, RequestCounter, coalesce
from .retry import RetryPolicy, is_transient, retrying, set_retry_policy
from .upload import Upload
from .urls import (
    StorageOptions,
    exists,
    expand,
    file_info,
    filesystem,
    for_each_path,
    is_url,
    make_dirs,
    move,
    read_bytes,
    read_head,
    remove,
    write_bytes,
)

__all__ = [
    "RemoteFile",
    "RequestCounter",
    "RetryPolicy",
    "StorageOptions",
    "Upload",
    "coalesce",
    "exists",
    "expand",
    "file_info",
    "filesystem",
    "for_each_path",
    "is_transient",
    "is_url",
    "make_dirs",
    "move",
    "read_bytes",
    "read_head",
    "remove",
    "retrying",
    "set_retry_policy",
    "write_bytes",
]
