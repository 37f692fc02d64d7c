"""Remote storage through fsspec: URLs, retries, ranged and coalesced reads, read-ahead, uploads.

- :mod:`.urls`: which paths are remote, their file system, whole-object operations;
- :mod:`.retry`: transient failures retried with backoff (:class:`RetryPolicy`);
- :mod:`.deadlines`, :mod:`.hedged`: deadlines from measured latencies and hedged requests
  (:class:`ReadPolicy`), so that a slow request cannot stall a read;
- :mod:`.ranged`: :class:`RemoteFile`, byte ranges with merged requests and read-ahead;
- :mod:`.upload`: :class:`Upload`, objects that appear only when committed.
"""

from .deadlines import ReadCounts, ReadPolicy, get_read_policy, set_read_policy
from .hedged import DeadlineExceeded, read_counts
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
from .versions import ObjectChangedError

__all__ = [
    "DeadlineExceeded",
    "ObjectChangedError",
    "ReadCounts",
    "ReadPolicy",
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
    "get_read_policy",
    "is_transient",
    "is_url",
    "make_dirs",
    "move",
    "read_bytes",
    "read_counts",
    "read_head",
    "remove",
    "retrying",
    "set_read_policy",
    "set_retry_policy",
    "write_bytes",
]
