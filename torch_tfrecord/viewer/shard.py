"""One file the viewer shows: its size, its offset index (loaded, or built in the background with
progress) and its records read by number, a damaged record handed back as damaged, not raised.

Until the index is ready the first pages are read from the start of the file, so the first page
never waits for the index; a compressed file is read that way throughout (its byte offsets cannot
be seeked to). A remote file with no index beside it is paged from its start too until the page
asks for its index (:meth:`Shard.build`): building one walks the record headers through ranged
requests, which for records smaller than a request's block means downloading the whole file, so
it is never done unasked.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import TFRecordError
from ..records.io import exists, file_size, is_url, resolve_compression
from ..records.reader import ReadStats, read_records
from ..support.text import plural
from .pages import (
    LARGE_RECORD,
    RecordRead,
    describe_at,
    intact_payloads,
    page_length,
    range_reader,
    read_sequential,
)
from .wire import WireError, find_value

if TYPE_CHECKING:  # numpy and the index modules load with the index: the first page needs neither
    import numpy as np
    import numpy.typing as npt

__all__ = ["RecordRead", "Shard"]

logger = logging.getLogger(__name__)

# Files up to this size have every record's CRCs checked in the background once indexed.
VERIFY_LIMIT = 256 << 20
# Files whose records are all this small are verified record by record, stepping over damaged
# regions; others (and compressed ones) by a stream that holds no record whole.
VERIFY_RECORD = 16 << 20
# Payloads of the records last read kept (the page asks for each image after its page).
_RECENT_BYTES = 32 << 20
# Records read from the start of a file while its index is not ready: pages past this wait.
_SEQUENTIAL_LIMIT = 2000
# How long a read of a remote file waits for the index beside it to load.
_LOAD_WAIT = 10.0


class Shard:
    """A file of the viewer, its index loaded or built on a background thread.

    Args:
        path: the file (local path or URL).
        storage_options: for URLs.
        expected: the records TFDS's ``dataset_info.json`` says the file holds, if any.
    """

    def __init__(
        self, path: str, storage_options: dict[str, Any] | None, expected: int | None = None
    ) -> None:
        self.path = path
        self.storage_options = storage_options
        self.expected = expected
        self.remote = is_url(path)
        self.size = file_size(path, storage_options)
        self.compression = resolve_compression("auto", path, storage_options)
        self.table: npt.NDArray[np.int64] | None = None
        # pending, loading, building, ready, sequential (compressed), unindexed (remote), failed
        self.state = "pending"
        self.scanned = 0  # bytes walked by the index build
        self.problems: list[str] = []  # damage found, in the words `verify` uses
        self.verified: str | None = None  # None (not checked), verifying, ok, damaged
        self._source: Any = None  # a OpenShard, opened on the first indexed read
        self._recent: OrderedDict[int, RecordRead] = OrderedDict()  # the records last read, by number
        self._recent_bytes = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._work_allowed = threading.Event()
        self._looked = threading.Event()  # set once the index beside the file is loaded, or known absent

    def start(self, build: bool = True) -> None:
        """Loads the index beside the file on a daemon thread, or builds one for a local file
        without (and verifies a small one). A remote file's index is loaded at once (cheaper
        than reading its first page from the start); a local file's work waits for
        :meth:`allow_work` (called at once with ``build``): it competes for the CPU (numpy's
        import included), so the viewer holds it back until its first page is served."""
        if build:
            self.allow_work()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._index, name=f"index {self.path}", daemon=True)
                self._thread.start()

    def allow_work(self) -> None:
        """Lets a local file's index be loaded or built, and the file verified."""
        self._work_allowed.set()

    def build(self) -> None:
        """Builds the index of a remote file that has none beside it, on a daemon thread, through
        ranged requests (the page asks for it: it may read the whole file)."""
        with self._lock:
            if self.state != "unindexed":
                return
            self.state = "building"
        threading.Thread(target=self._build_and_verify, name=f"index {self.path}", daemon=True).start()

    def wait(self, timeout: float | None = None) -> None:
        """Waits for the index to be loaded or built (for tests and benchmarks)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _index(self) -> None:
        if not self.remote:
            self._work_allowed.wait()
        try:
            self._load()
        finally:
            self._looked.set()
        if self.state == "pending":  # a local file with no index beside it
            self._build_and_verify()

    def _load(self) -> None:
        if self.compression is not None:
            self.state = "sequential"
            return
        from ..records.index import default_index_path, load_index

        index_path = default_index_path(self.path)
        try:
            if exists(index_path, self.storage_options):
                self.state = "loading"
                try:
                    self.table = load_index(
                        index_path,
                        data_path=self.path,
                        allow_damaged_gaps=True,
                        storage_options=self.storage_options,
                    )
                    self.state = "ready"
                    return
                except TFRecordError as error:
                    self.problems.append(f"{type(error).__name__}: {error}")
        except (TFRecordError, OSError) as error:
            self._failed(error)
            return
        self.state = "unindexed" if self.remote else "pending"

    def _build_and_verify(self) -> None:
        from ..records.index import build_index

        self.state = "building"
        stats = ReadStats()
        try:
            self.table = build_index(
                self.path,
                on_error="skip",
                stats=stats,
                storage_options=self.storage_options,
                progress=self._progress,
            )
        except (TFRecordError, OSError) as error:
            self._failed(error)
            return
        self.state = "ready"
        if self.remote or self.size > VERIFY_LIMIT:
            self.problems.extend(stats.errors)  # what the header walk found; verify() reads all
        else:
            self._verify()

    def _failed(self, error: Exception) -> None:
        self.problems.append(f"{type(error).__name__}: {error}")
        self.state = "sequential" if isinstance(error, TFRecordError) else "failed"
        if not self.remote and self.size <= VERIFY_LIMIT:
            self._verify()  # names the damage as `verify` does

    def verify(self) -> None:
        """Checks every record's CRCs on a daemon thread, as ``torch-tfrecord verify`` does."""
        if self.verified is None:
            self.verified = "verifying"
            threading.Thread(target=self._verify, name=f"verify {self.path}", daemon=True).start()

    def intact_records(self, stats: ReadStats | None = None) -> Iterator[bytes]:
        """Every intact record from the start, stepping over damage as ``verify`` does (each
        damaged region counted in ``stats``)."""
        options = self.storage_options
        return read_records(
            self.path, compression=self.compression, on_error="skip", stats=stats, storage_options=options
        )

    def small_records(self) -> Iterator[bytes]:
        """The intact records of at most :data:`~.pages.LARGE_RECORD` bytes from the start (for
        the schema and the statistics): a larger one is stepped over, never held, and damaged
        framing ends them (logged)."""
        size = None if self.compression is not None else self.size
        return intact_payloads(self.path, self.compression, self.storage_options, size, self._log_damage)

    def _log_damage(self, damage: str) -> None:
        logger.info("%s", damage)

    def _verify(self) -> None:
        self.verified = "verifying"
        stats = ReadStats()
        table = self.table
        largest = self.size if table is None or not len(table) else int(table[:, 1].max())
        try:
            if self.compression is None and largest <= VERIFY_RECORD:  # damaged regions stepped over
                for _ in self.intact_records(stats):
                    pass
            else:  # no record held whole, however far it inflates (damaged framing ends it)
                size = None if self.compression is not None else self.size
                for _ in intact_payloads(
                    self.path, self.compression, self.storage_options, size, stats.errors.append
                ):
                    pass
        except (TFRecordError, OSError) as error:
            stats.errors.append(f"{type(error).__name__}: {error}")
        found = [*stats.errors, *filter(None, [stats.damage_summary()])]
        self.problems.extend(p for p in found if p not in self.problems)
        self.verified = "damaged" if stats.errors else "ok"

    def _progress(self, scanned: int) -> None:
        self.scanned = scanned

    def describe(self) -> dict[str, Any]:
        """What the files page shows of this file."""
        table = self.table
        records = len(table) if table is not None else None
        if records is not None and self.expected is not None and records != self.expected:
            problem = f"holds {records:,} records, but dataset_info.json says {self.expected:,}"
            if problem not in self.problems:
                self.problems.append(problem)
        return {
            "path": self.path,
            "size": self.size,
            "compression": self.compression,
            "state": self.state,
            "records": records,
            "progress": 1.0 if self.state == "ready" else (self.scanned / self.size if self.size else 1.0),
            "problems": list(self.problems),
            "verified": self.verified,
            "no_jump": self.no_jump(),
        }

    def no_jump(self) -> str | None:
        """Why the page cannot jump into this file (yet), or None when it can."""
        if self.state == "unindexed":
            return (
                "no index beside this remote file, so pages are read from its start; jumping needs "
                f"an index, and building one reads the file's record headers through ranged requests "
                f"(up to all {plural(self.size, 'byte')} for small records)"
            )
        if self.state == "sequential" and self.compression is not None:
            return (
                f"a {self.compression.upper()}-compressed file has no byte offsets to jump to: "
                "pages are read from its start"
            )
        if self.state == "sequential":
            return "the index could not be built (see the damage listed): pages are read from the start"
        if self.state == "failed":
            return "the file could not be read"
        if self.state != "ready":
            return "jumps wait for the index, which is being loaded or built"
        return None

    def record_count(self) -> int | None:
        """The records indexed, or None until the index is ready."""
        return None if self.table is None else len(self.table)

    def read(self, first: int, count: int) -> list[RecordRead] | None:
        """Records ``first`` to ``first + count`` (fewer at the end); None when they cannot be
        read until the index is ready."""
        if (
            self.remote and self._thread is not None
        ):  # its index first: cheaper than reading it from the start
            self._looked.wait(_LOAD_WAIT)
        table = self.table
        if table is not None:
            return self._read_indexed(table, first, count)
        if self.state != "sequential" and first + count > _SEQUENTIAL_LIMIT:
            self.allow_work()  # the page needs the index now
            return None
        return self._read_sequential(first, count)

    def _read_indexed(self, table: npt.NDArray[np.int64], first: int, count: int) -> list[RecordRead]:
        import numpy as np

        numbers = np.arange(max(first, 0), min(first + count, len(table)), dtype=np.int64)
        if not len(numbers):
            return []
        with self._lock:
            kept = [self._recent.get(number) for number in numbers.tolist()]
        if all(read is not None for read in kept):  # the page's images, asked for after the page
            return [read for read in kept if read is not None]
        reads = self._read_entries(table, numbers)
        with self._lock:
            for read in reads:
                self._recent[read.number] = read
                self._recent_bytes += len(read.payload or b"")
            while self._recent_bytes > _RECENT_BYTES and len(self._recent) > 1:
                self._recent_bytes -= len(self._recent.popitem(last=False)[1].payload or b"")
        return reads

    def _read_entries(self, table: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64]) -> list[RecordRead]:
        """The page's records from ``numbers`` on, within its byte budget (:mod:`.pages`): whole,
        or a large one described from its wire format."""

        numbers = numbers[: page_length(table[numbers, 1])]
        large = table[numbers, 1] > LARGE_RECORD
        reads = {read.number: read for read in self._read_whole(table, numbers[~large])}
        for number in numbers[large].tolist():
            offset, framed = (int(x) for x in table[number])
            read = range_reader(self._open(), offset + 12)
            reads[number] = RecordRead(
                number, offset, framed, None, large=True, described=describe_at(read, framed - 16)
            )
        return [reads[number] for number in numbers.tolist()]

    def _read_whole(self, table: npt.NDArray[np.int64], numbers: npt.NDArray[np.int64]) -> list[RecordRead]:
        import numpy as np

        from ..records.entries import read_entries_at

        if not len(numbers):
            return []
        source = self._open()
        try:
            payloads: list[bytes | None] = list(
                read_entries_at(source, self.path, self.size, table[numbers], numbers)
            )
            errors: list[str | None] = [None] * len(numbers)
        except TFRecordError:  # one at a time, to show which are damaged and the rest as they are
            payloads, errors = [], []
            for number in numbers.tolist():
                one = np.array([number], dtype=np.int64)
                try:
                    payloads.extend(read_entries_at(source, self.path, self.size, table[one], one))
                    errors.append(None)
                except TFRecordError as error:
                    payloads.append(None)
                    errors.append(f"{type(error).__name__}: {error}")
        rows = table[numbers].tolist()
        return [
            RecordRead(int(number), int(row[0]), int(row[1]), payload, error)
            for number, row, payload, error in zip(numbers.tolist(), rows, payloads, errors, strict=True)
        ]

    def _read_sequential(self, first: int, count: int) -> list[RecordRead]:
        size = None if self.compression is not None else self.size
        return read_sequential(
            self.path, self.compression, self.storage_options, first, count, file_size=size
        )

    def value(self, number: int, key: str, item: int, limit: int) -> bytes | None:
        """Value ``item`` of the bytes feature ``key`` of large record ``number``, read alone
        (at most ``limit`` bytes); None when there is no such value.

        Raises:
            ValueError: the value is larger than ``limit``, or the record is no Example.
        """
        table = self.table
        if table is None or not 0 <= number < len(table):
            return None
        offset, framed = (int(x) for x in table[number])
        read = range_reader(self._open(), offset + 12)
        try:
            found = find_value(read, framed - 16, key, item)
        except WireError as error:
            raise ValueError(f"record {number} of {self.path!r} is not an Example: {error}") from None
        if found is None:
            return None
        if found[1] > limit:
            raise ValueError(
                f"value {item} of {key!r} in record {number} of {self.path!r} has {found[1]:,} bytes; the "
                f"viewer sends at most {limit:,}"
            )
        return read(*found)

    def _open(self) -> Any:
        with self._lock:
            if self._source is None:  # the datasets' sources: a local file, or ranged requests
                from ..records.shard_access import ShardKind, ShardSpec, Storage, open_shard

                kind: ShardKind = "remote" if self.remote else "local"
                spec = ShardSpec(self.path, self.size, kind, stored_size=self.size)
                self._source = open_shard(spec, Storage(dict(self.storage_options or {})))
            return self._source

    def locate(self, offset: int) -> int | None:
        """The number of the record holding byte ``offset`` (the last record before it when
        ``offset`` falls in a damaged gap), or None until the index is ready."""
        table = self.table
        if table is None:
            self.allow_work()  # the page needs the index now
        if table is None or not len(table):
            return None
        found = int(table[:, 0].searchsorted(offset, side="right")) - 1
        return max(0, min(len(table) - 1, found))

    def close(self) -> None:
        with self._lock:
            if self._source is not None:
                self._source.close()
            self._source = None
