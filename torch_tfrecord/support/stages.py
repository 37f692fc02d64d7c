"""Where loading spends its time, per thread, for two clock reads a stage: the counters behind
``dataset.stats()`` (:mod:`torch_tfrecord.data.telemetry` shares them between processes).

Each stage (reading, a remote fetch, inflating, decoding Examples, decoding images, the user's
transform, the hand-off from a worker) is timed where it runs::

    token = begin()
    ...                       # the stage's work
    end(READ, token, nbytes)  # nothing happens when token is None

A stage inside another is taken out of the outer one's time (each stage counts its *own* time),
so a thread's stages never count a nanosecond twice. It costs no stack: ``begin`` returns the
clock less the time the thread's stages have counted so far, and ``end`` counts what that
difference grew by, so a stage that raises before its ``end`` is simply left uncounted.

A thread counts only while a dataset's loop or loading runs in it (:func:`swap` makes a
:class:`ThreadRecord` current); anywhere else ``begin`` returns None at once. Work a thread hands
to a pool and waits for (the remote shards of one batch, read at once) is counted through
:class:`Helpers`: the helpers' stages share out the time the thread waited for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import TypeVar

__all__ = [
    "BUCKETS",
    "BYTES",
    "CACHED",
    "DECODE",
    "FIELDS",
    "FIRST_COUNT",
    "FIRST_NS",
    "HANDOFF",
    "HISTOGRAM",
    "IMAGE_DECODE",
    "INFLATE",
    "LOOP_COUNT",
    "LOOP_NS",
    "READ",
    "RECORDS",
    "REMOTE",
    "REQUESTS",
    "STAGES",
    "TRANSFORM",
    "Helpers",
    "ThreadRecord",
    "begin",
    "bucket",
    "bucket_bounds",
    "count",
    "end",
    "lap",
    "swap",
]

STAGES = ("read", "remote", "inflate", "decode", "image_decode", "transform", "handoff")
"""The stages, in the order of their counters (each: nanoseconds, calls, bytes)."""
READ, REMOTE, INFLATE, DECODE, IMAGE_DECODE, TRANSFORM, HANDOFF = range(len(STAGES))
LOOP_SPAN, WORKER_SPAN = len(STAGES), len(STAGES) + 1  # the trace's names of a loop's next()

# A thread's counters, one flat list (the layout of a process's slot in shared memory too): each
# stage's nanoseconds, calls and amount (bytes; for decoding, records), then the others.
BYTES = 3 * READ + 2  # bytes read from the shards (framed records, or what a batch read took)
RECORDS = 3 * DECODE + 2  # records decoded
_OTHERS = 3 * len(STAGES)
REQUESTS = _OTHERS  # requests to remote storage that a read waited for
CACHED = _OTHERS + 1  # shards opened through the node's cache
LOOP_NS, LOOP_COUNT = _OTHERS + 2, _OTHERS + 3  # the loop's next() (first of a pass excluded)
FIRST_NS, FIRST_COUNT = _OTHERS + 4, _OTHERS + 5  # the first next() of each pass (start-up)
HISTOGRAM = _OTHERS + 6  # LOOP_NS's next() calls by duration (see bucket)
BUCKETS = 112
FIELDS = HISTOGRAM + BUCKETS
_SUB = 4  # buckets per doubling: each about 19% wide
_FLOOR_BITS = 10  # below 2**10 ns (1 us): bucket 0


def bucket(ns: int) -> int:
    """The histogram bucket of a duration: 4 per doubling from 1 us, the last one open-ended."""
    bits = ns.bit_length()
    if bits <= _FLOOR_BITS:
        return 0
    return min(BUCKETS - 1, 1 + (bits - _FLOOR_BITS - 1) * _SUB + ((ns >> (bits - 3)) & 3))


def bucket_bounds(index: int) -> tuple[int, int]:
    """The durations ``[low, high)`` in nanoseconds of a bucket (the last one's ``high`` is its ``low``
    doubled: it holds everything above)."""
    if index == 0:
        return 0, 1 << _FLOOR_BITS
    octave, sub = divmod(index - 1, _SUB)
    base = 1 << (_FLOOR_BITS + octave)
    low = base + base * sub // _SUB
    return low, (2 * base if index == BUCKETS - 1 else base + base * (sub + 1) // _SUB)


class ThreadRecord:
    """One thread's counters for one dataset (see the module's docstring).

    Attributes:
        counts: the counters (:data:`FIELDS` ints), only ever added to by this thread.
        consumed: nanoseconds the thread's stages have counted (``begin`` and ``end`` keep stages
            that nest apart).
        spans: while a trace records, ``(code, start_ns, end_ns)`` of each stage (``code``: the
            stage plus 16 times the thread's id); else None.
    """

    __slots__ = ("code", "consumed", "counts", "now", "spans", "starts")

    def __init__(self, spans: bool = False) -> None:
        self.counts = [0] * FIELDS
        self.consumed = 0
        self.now = 0  # the clock at the last stage's end
        self.code = threading.get_native_id() << 4
        self.spans: list[tuple[int, int, int]] | None = [] if spans else None
        self.starts: list[int] = []  # a trace's stage starts, innermost last

    def tracing(self, on: bool) -> None:
        """Starts or stops keeping spans (what was kept is let go)."""
        self.spans = [] if on else None
        self.starts = []


class _Local(threading.local):
    record: ThreadRecord | None = None


_local = _Local()


def swap(record: ThreadRecord | None) -> ThreadRecord | None:
    """Makes ``record`` this thread's current record; returns the one it replaces (to restore)."""
    previous = _local.record
    _local.record = record
    return previous


def begin() -> int | None:
    """A stage starts in this thread: its token for :func:`end` (None when nothing records here)."""
    record = _local.record
    if record is None:
        return None
    now = perf_counter_ns()
    if record.spans is not None:
        record.starts.append(now)
    return now - record.consumed


def end(stage: int, token: int | None, amount: int = 0) -> ThreadRecord | None:
    """The stage begun with ``token`` ends: its own time, a call and ``amount`` (bytes; for
    decoding, records) are counted. Returns the thread's record (None: nothing counted)."""
    if token is None:
        return None
    now = perf_counter_ns()
    record = _local.record
    if record is None:
        return None
    own = now - record.consumed - token
    record.consumed += own
    counts = record.counts
    at = 3 * stage
    counts[at] += own
    counts[at + 1] += 1
    if amount:
        counts[at + 2] += amount
    if record.spans is not None and record.starts:
        record.spans.append((record.code + stage, record.starts.pop(), now))
    record.now = now
    return record


def lap(stage: int, token: int | None, amount: int = 0) -> int | None:
    """:func:`end` of ``stage`` and :func:`begin` of the next one, at the same instant."""
    record = end(stage, token, amount)
    if record is None:
        return None
    if record.spans is not None:
        record.starts.append(record.now)
    return record.now - record.consumed


def count(field: int, amount: int) -> None:
    """Adds ``amount`` to a counter (:data:`REQUESTS`, :data:`CACHED`) of this thread's record."""
    record = _local.record
    if record is not None:
        record.counts[field] += amount


T = TypeVar("T")
R = TypeVar("R")


class Helpers:
    """Work this thread hands to a pool and waits for, counted as the stages the helpers ran.

    Used as ``with Helpers() as helpers: pool.map(helpers.wrap(work), items)``. Each helper
    call counts into a record of its own; at the end, the time this thread waited is shared out
    over the helpers' stages in proportion to the time they took (their time outside any stage
    stays with this thread's own stage), and their other counters are added to this thread's.
    """

    def __init__(self) -> None:
        self.parent = _local.record
        self._lock = threading.Lock()
        self._records: list[ThreadRecord] = []
        self._busy = 0
        self._start = 0

    def __enter__(self) -> Helpers:
        self._start = perf_counter_ns()
        return self

    def wrap(self, work: Callable[[T], R]) -> Callable[[T], R]:
        """``work``, counting what it does in the thread that runs it."""
        if self.parent is None:
            return work
        traced = self.parent.spans is not None

        def helped(item: T) -> R:
            record = ThreadRecord(traced)
            previous = swap(record)
            start = perf_counter_ns()
            try:
                return work(item)
            finally:
                swap(previous)
                with self._lock:
                    self._busy += perf_counter_ns() - start
                    self._records.append(record)

        return helped

    def __exit__(self, *exc_info: object) -> None:
        parent = self.parent
        if parent is None or not self._records:
            return
        waited = perf_counter_ns() - self._start
        with self._lock:
            records, busy = self._records, self._busy
            self._records = []
        share = waited / busy if busy else 0.0
        counts = parent.counts
        shared = 0
        for record in records:
            for stage in range(len(STAGES)):
                at = 3 * stage
                own = int(record.counts[at] * share)
                counts[at] += own
                counts[at + 1] += record.counts[at + 1]
                counts[at + 2] += record.counts[at + 2]
                shared += own
            for field in range(_OTHERS, FIELDS):
                counts[field] += record.counts[field]
            if parent.spans is not None and record.spans:
                parent.spans.extend(record.spans)
        parent.consumed += min(shared, waited)
