"""One process's side of a dataset's load telemetry: its threads' counters summed into its slot of
the shared tensor, and the loop's meters (see :mod:`.shared` for the whole picture).

The tensor's layout: a header (:data:`TRACING`, :data:`TOKEN`), then a slot per process (the main
process, with the histogram of the loop's waits, then worker ``k`` in slot ``1 + k``, without one),
each slot a small header (:data:`PID`, :data:`FLUSHED`, :data:`STARTED`) and the counters of
:mod:`~torch_tfrecord.support.stages`.
"""

from __future__ import annotations

import os
import tempfile
import threading
from time import perf_counter_ns

import numpy as np
import numpy.typing as npt

from ...support.stages import (
    BUCKETS,
    FIELDS,
    FIRST_COUNT,
    FIRST_NS,
    FLOOR_BITS,
    HISTOGRAM,
    LOOP_COUNT,
    LOOP_NS,
    LOOP_SPAN,
    PER_DOUBLING,
    WORKER_SPAN,
    ThreadRecord,
    current,
    swap,
)

__all__ = [
    "FLUSHED",
    "HEAD",
    "PID",
    "PROCESS_SLOT",
    "SIZE",
    "SLOTS",
    "SLOT_HEAD",
    "STARTED",
    "TOKEN",
    "TRACE_SPANS",
    "TRACING",
    "BatchMeter",
    "NoMeter",
    "ProcessCounters",
    "SampleMeter",
    "buckets",
    "slot_range",
    "trace_dir",
]

SLOTS = 65
"""The main process, 63 workers and the loading process of ``process=True``; workers past them
are not counted."""
PROCESS_SLOT = SLOTS - 1
"""The slot of the loading process (``process=True``)."""
TRACE_SPANS = 1 << 16
"""Spans a process writes in one trace at most (1.5 MB); later ones are left out."""
TRACING, TOKEN = 0, 1  # the header: a trace is recording (0 / 1), and its directory's number
HEAD = 4
PID, FLUSHED, STARTED = range(3)  # each slot's own header
SLOT_HEAD = 4
_MAIN = SLOT_HEAD + FIELDS  # the main process's slot, its histogram of waits included
_WORKER = SLOT_HEAD + HISTOGRAM  # a worker's slot: no histogram
SIZE = HEAD + _MAIN + (SLOTS - 1) * _WORKER
_FLUSH_NS = 50_000_000
_TRACE_FLUSH_NS = 5_000_000
Int64s = npt.NDArray[np.int64]


def buckets(durations: npt.ArrayLike) -> Int64s:
    """:func:`~torch_tfrecord.support.stages.bucket` of each duration (below 2**53 ns), at once."""
    ns = np.asarray(durations, dtype=np.int64)
    bits = np.frexp(ns.astype(np.float64))[1].astype(np.int64)  # exact below 2**53: bit_length
    shift = np.maximum(bits - 3, 0)
    found = 1 + (bits - FLOOR_BITS - 1) * PER_DOUBLING + ((ns >> shift) & 3)
    return np.where(bits <= FLOOR_BITS, 0, np.minimum(found, BUCKETS - 1))


def _count_waits(record: ThreadRecord) -> None:
    """Puts a loop record's gathered waits into its count and histogram."""
    waits, record.waits = record.waits, []
    counts = record.counts
    counts[LOOP_COUNT] += len(waits)
    counts[LOOP_NS] += sum(waits)
    for index, number in zip(*np.unique(buckets(waits), return_counts=True), strict=True):
        counts[HISTOGRAM + int(index)] += int(number)


def slot_range(slot: int) -> tuple[int, int]:
    """Where slot ``slot`` lies in the tensor, and how many counters it keeps."""
    if slot == 0:
        return HEAD, FIELDS
    return HEAD + _MAIN + (slot - 1) * _WORKER, HISTOGRAM


def trace_dir(token: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"torch-tfrecord-trace-{token:016x}")


class ProcessCounters:
    """This process's side of a dataset's telemetry: its threads' records and its slot."""

    def __init__(self, array: Int64s, slot: int) -> None:
        self.pid = os.getpid()
        self.array = array
        at, self.width = slot_range(slot)
        self.slot = array[at : at + SLOT_HEAD + self.width]
        self.number = slot
        self.loop_span = LOOP_SPAN if slot == 0 else WORKER_SPAN
        self.lock = threading.Lock()
        self.loops: dict[int, ThreadRecord] = {}  # the loop threads' records, by thread
        self.others: list[ThreadRecord] = []  # loading threads' (prefetch), retired as they end
        self.retired = [0] * FIELDS
        self.base: Int64s | None = None  # the slot's totals before this process
        self.started = 0
        self.last = 0  # when the loop last received an item
        self.ended_at = 0  # ``last`` when the loop's pass ended (the window then ends there)
        self.flush_at = 0
        self.token = int(array[TOKEN]) if array[TRACING] else 0  # the trace being recorded
        self.written = 0  # spans written in it

    def loop_record(self) -> ThreadRecord:
        """This thread's record as a loop (kept for the process's life)."""
        ident = threading.get_ident()
        record = self.loops.get(ident)
        if record is None:
            with self.lock:
                record = self.loops[ident] = ThreadRecord(bool(self.token))
        return record

    def loading_record(self) -> ThreadRecord:
        """A record for a loading thread that ends (let go with :meth:`retire`)."""
        record = ThreadRecord(bool(self.token))
        with self.lock:
            self.others.append(record)
        return record

    def retire(self, record: ThreadRecord) -> None:
        with self.lock:
            self.retired = [a + b for a, b in zip(self.retired, record.counts, strict=True)]
            self.others.remove(record)
            if record.spans:
                self._write_spans(record.spans)

    def took(self, record: ThreadRecord, elapsed: int, first: bool, start: int, now: int) -> None:
        """The loop received an item (main process: it waited ``elapsed``; a worker: it made one)."""
        self.last = now
        if first:
            counts = record.counts
            counts[FIRST_NS] += elapsed
            counts[FIRST_COUNT] += 1
            if not self.started:
                self.started = start
        else:
            record.waits.append(elapsed)  # (counted, summed and sorted into the histogram at the flush)
        if record.spans is not None:
            record.spans.append((record.code + self.loop_span, start, now))
        if now >= self.flush_at:
            self.flush(now)

    def flush(self, now: int) -> None:
        """Writes this process's totals into its slot (and a trace's new spans to its file)."""
        with self.lock:
            records = [*self.loops.values(), *self.others]
            for record in records:
                if record.waits:
                    _count_waits(record)
            totals = np.array(self.retired[: self.width], dtype=np.int64)
            for record in records:
                totals += np.array(record.counts[: self.width], dtype=np.int64)
            slot = self.slot
            if self.base is None:  # the first flush: go on from whoever had the slot before
                fresh = int(slot[PID]) in (0, self.pid)
                self.base = np.zeros(self.width, np.int64) if fresh else slot[SLOT_HEAD:].copy()
                slot[PID] = self.pid
            slot[SLOT_HEAD:] = self.base + totals
            slot[FLUSHED] = now
            if self.started and not slot[STARTED]:
                slot[STARTED] = self.started
            self._trace(records)
            # A trace's spans leave a worker often: what it has not written when the trace ends is lost.
            often = self.token and self.loop_span == WORKER_SPAN
            self.flush_at = now + (_TRACE_FLUSH_NS if often else _FLUSH_NS)

    def _trace(self, records: list[ThreadRecord]) -> None:
        """Writes the records' spans; follows the header's trace flag (spans kept or not)."""
        spans: list[tuple[int, int, int]] = []
        for record in records:
            if record.spans:
                spans.extend(record.spans)
                record.spans = []
        if spans:
            self._write_spans(spans)
        token = int(self.array[TOKEN]) if self.array[TRACING] else 0
        if token != self.token:
            self.token, self.written = token, 0
            for record in records:
                record.tracing(bool(token))

    def _write_spans(self, spans: list[tuple[int, int, int]]) -> None:
        room = TRACE_SPANS - self.written
        if not self.token or room <= 0:
            return
        kept = np.asarray(spans[:room], dtype=np.int64)
        path = os.path.join(trace_dir(self.token), f"{self.number}-{self.pid}.spans")
        try:
            with open(path, "ab") as out:  # (no directory: the trace has ended)
                kept.tofile(out)
        except OSError:
            return
        self.written += len(kept)


class BatchMeter:
    """The loop's side of one pass in one process, one item per ``next()`` (a batch): each
    ``next()`` timed from the loop's ask (:meth:`asked`) to the item being ready (:meth:`ready`),
    the stages in between counted in the loop thread's record.

    Lean on purpose (it runs every batch): the record stays the thread's current one between
    batches, paused (made current again only after another dataset's loop ran in the thread), and
    a wait is appended to a list until a flush is due; the first batch of a pass, a trace and the
    flush take the longer way.
    """

    __slots__ = ("due", "first", "last", "previous", "process", "record", "start")

    def __init__(self, process: ProcessCounters) -> None:
        self.process = process
        self.record = process.loop_record()
        self.previous: ThreadRecord | None = None
        self.start = self.last = self.due = 0
        self.first = True

    def asked(self) -> None:
        record = self.record
        if current() is not record:
            self.previous = swap(record)
        record.paused = False
        self.start = perf_counter_ns()

    def ready(self) -> None:
        now = perf_counter_ns()
        record = self.record
        record.paused = True
        if now < self.due:
            record.waits.append(now - self.start)
            self.last = now
            return
        process = self.process
        process.took(record, now - self.start, self.first, self.start, now)
        self.first = False
        self.due = 0 if record.spans is not None else process.flush_at

    def close(self) -> None:
        """The pass ended (or was left): the last ask is no wait for an item; totals written."""
        self.record.paused = True
        if current is None:  # a loop left open at the interpreter's exit: this module is torn down
            return
        if current() is self.record:
            swap(self.previous)
        process = self.process
        process.last = process.ended_at = max(self.last, process.last)
        process.flush(perf_counter_ns())


class SampleMeter(BatchMeter):
    """:class:`BatchMeter` for samples: a run of ``per`` samples (the loader's batch) is one wait,
    from the run's first ask to its last sample; within a run, a check and a count a sample."""

    __slots__ = ("left", "per")

    def __init__(self, process: ProcessCounters, per: int) -> None:
        super().__init__(process)
        self.per = self.left = per

    def asked(self) -> None:
        if self.left == self.per:  # a run begins
            super().asked()

    def ready(self) -> None:
        self.left -= 1
        if not self.left:
            self.left = self.per
            super().ready()


class NoMeter:
    """The meter of a dataset without telemetry: nothing at all."""

    __slots__ = ()

    def asked(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def close(self) -> None:
        pass
