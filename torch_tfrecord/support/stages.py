"""Where loading spends its time, per thread, for two clock reads a stage: the counters behind
``dataset.stats()`` (:mod:`torch_tfrecord.data.telemetry.shared` shares them between processes).

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
from contextvars import ContextVar
from time import perf_counter_ns
from typing import TypeVar

__all__ = [
    "BUCKETS",
    "BYTES",
    "CACHED",
    "DEADLINE_RETRIES",
    "DECODE",
    "FIELDS",
    "FIRST_COUNT",
    "FIRST_NS",
    "FLOOR_BITS",
    "HANDOFF",
    "HEDGES_SENT",
    "HEDGES_WON",
    "HISTOGRAM",
    "IMAGE_DECODE",
    "INFLATE",
    "LOOP_COUNT",
    "LOOP_NS",
    "LOOP_SPAN",
    "PER_DOUBLING",
    "READ",
    "RECORDS",
    "REMOTE",
    "REQUESTS",
    "STAGES",
    "TRANSFORM",
    "WORKER_SPAN",
    "Helpers",
    "ThreadRecord",
    "begin",
    "bucket",
    "bucket_bounds",
    "count",
    "current",
    "end",
    "lap",
    "swap",
]

STAGES = ("read", "remote", "inflate", "decode", "image_decode", "transform", "handoff")
"""The stages, in the order of their counters."""
# Each stage is its counters' place: its nanoseconds there, its amount (bytes; for decoding,
# records) in the next.
READ, REMOTE, INFLATE, DECODE, IMAGE_DECODE, TRANSFORM, HANDOFF = range(0, 2 * len(STAGES), 2)
LOOP_SPAN, WORKER_SPAN = 2 * len(STAGES), 2 * len(STAGES) + 2  # a trace's names of a loop's next()

# A thread's counters, one flat list (the layout of a process's slot in shared memory too): the
# stages', then the others.
BYTES = READ + 1  # bytes read from the shards (framed records, or what a batch read took)
RECORDS = DECODE + 1  # records decoded
_OTHERS = 2 * len(STAGES)
REQUESTS = _OTHERS  # requests to remote storage that a read waited for
CACHED = _OTHERS + 1  # shards opened through the node's cache
LOOP_NS, LOOP_COUNT = _OTHERS + 2, _OTHERS + 3  # the loop's next() (first of a pass excluded)
FIRST_NS, FIRST_COUNT = _OTHERS + 4, _OTHERS + 5  # the first next() of each pass (start-up)
HEDGES_SENT, HEDGES_WON = _OTHERS + 6, _OTHERS + 7  # remote requests sent again, and answered first
DEADLINE_RETRIES = _OTHERS + 8  # remote requests given up on at their deadline (and retried)
HISTOGRAM = _OTHERS + 9  # LOOP_NS's next() calls by duration (see bucket)
BUCKETS = 112
FIELDS = HISTOGRAM + BUCKETS
PER_DOUBLING = 4  # histogram buckets per doubling: each about 19% wide
FLOOR_BITS = 10  # below 2**10 ns (1 us): bucket 0


def bucket(ns: int) -> int:
    """The histogram bucket of a duration: 4 per doubling from 1 us, the last one open-ended."""
    bits = ns.bit_length()
    if bits <= FLOOR_BITS:
        return 0
    return min(BUCKETS - 1, 1 + (bits - FLOOR_BITS - 1) * PER_DOUBLING + ((ns >> (bits - 3)) & 3))


def bucket_bounds(index: int) -> tuple[int, int]:
    """The durations ``[low, high)`` in nanoseconds of a bucket (the last one's ``high`` is its ``low``
    doubled: it holds everything above)."""
    if index == 0:
        return 0, 1 << FLOOR_BITS
    octave, sub = divmod(index - 1, PER_DOUBLING)
    base = 1 << (FLOOR_BITS + octave)
    low = base + base * sub // PER_DOUBLING
    return low, (2 * base if index == BUCKETS - 1 else base + base * (sub + 1) // PER_DOUBLING)


class ThreadRecord:
    """One thread's counters for one dataset (see the module's docstring).

    Attributes:
        counts: the counters (:data:`FIELDS` ints), only ever added to by this thread (the
            loop's waits: gathered in ``waits`` first, then counted all at once).
        consumed: nanoseconds the thread's stages have counted (``begin`` and ``end`` keep stages
            that nest apart).
        spans: while a trace records, ``(code, start_ns, end_ns)`` of each stage (``code``: the
            stage plus 32 times the thread's id); else None.
        paused: a loop's record between two ``next()``: current, but counting nothing.
    """

    __slots__ = ("code", "consumed", "counts", "paused", "spans", "starts", "waits")

    def __init__(self, spans: bool = False) -> None:
        self.counts = [0] * FIELDS
        self.consumed = 0
        self.paused = False
        self.waits: list[int] = []  # the loop's next() durations, put in LOOP_COUNT and HISTOGRAM later
        self.code = threading.get_native_id() << 5
        self.spans: list[tuple[int, int, int]] | None = [] if spans else None
        self.starts: list[int] = []  # a trace's stage starts, innermost last

    def tracing(self, on: bool) -> None:
        """Starts or stops keeping spans (what was kept is let go)."""
        self.spans = [] if on else None
        self.starts = []


# The current record: a context variable (each thread has its own, and a new thread none), which
# reads in a third of the instructions of a threading.local attribute.
_current: ContextVar[ThreadRecord | None] = ContextVar("torch_tfrecord_stages", default=None)
_get = _current.get


def swap(record: ThreadRecord | None) -> ThreadRecord | None:
    """Makes ``record`` this thread's current record; returns the one it replaces (to restore)."""
    previous = _get()
    _current.set(record)
    return previous


def current() -> ThreadRecord | None:
    """This thread's current record."""
    return _get()


def begin() -> int | None:
    """A stage starts in this thread: its token for :func:`end` (None when nothing records here)."""
    record = _get()
    if record is None or record.paused:
        return None
    now = perf_counter_ns()
    if record.spans is not None:
        record.starts.append(now)
    return now - record.consumed


def end(stage: int, token: int | None, amount: int = 0) -> int:
    """The stage begun with ``token`` ends: its own time and ``amount`` (bytes; for decoding,
    records) are counted. Returns the clock (0: nothing was counted)."""
    if token is None:
        return 0
    now = perf_counter_ns()
    record = _get()
    if record is None:
        return 0
    own = now - record.consumed - token
    record.consumed += own
    counts = record.counts
    counts[stage] += own
    if amount:
        counts[stage + 1] += amount
    if record.spans is not None and record.starts:
        record.spans.append((record.code + stage, record.starts.pop(), now))
    return now


def lap(stage: int, token: int | None, amount: int = 0) -> int | None:
    """:func:`end` of ``stage`` and :func:`begin` of the next one, at the same instant."""
    now = end(stage, token, amount)
    record = _get()
    if not now or record is None:
        return None
    if record.spans is not None:
        record.starts.append(now)
    return now - record.consumed


def count(field: int, amount: int) -> None:
    """Adds ``amount`` to a counter (:data:`REQUESTS`, :data:`CACHED`, :data:`HEDGES_SENT` ...) of
    this thread's record."""
    record = _get()
    if record is not None and not record.paused:
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
        parent = _get()
        self.parent = None if parent is None or parent.paused else parent
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
            for at in range(0, _OTHERS, 2):
                own = int(record.counts[at] * share)
                counts[at] += own
                counts[at + 1] += record.counts[at + 1]
                shared += own
            for field in range(_OTHERS, FIELDS):
                counts[field] += record.counts[field]
            if parent.spans is not None and record.spans:
                parent.spans.extend(record.spans)
        parent.consumed += min(shared, waited)
