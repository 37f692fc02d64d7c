"""A dataset's load telemetry: each process's stage counters in shared memory, the loop's wait in
``next()``, and a bounded trace of recent stages, read by ``dataset.stats()`` in the main process.

One int64 tensor per dataset, made when the dataset is built and shared with DataLoader workers
however they start (as :mod:`.epoch_counter` shares its counts): a header, then a *slot* per
process (the main process, then worker ``k`` in slot ``1 + k``), then a ring of recent spans for
each of the first :data:`TRACED` slots. Each process sums its threads' counters
(:class:`~torch_tfrecord.support.stages.ThreadRecord`) into its own slot, at most every 50 ms and
when a pass ends; only the main process reads the others' slots. A slot holds totals since the
dataset was made: a worker of a later pass goes on from the totals its slot holds, so every counter
only grows, and a window (``stats(reset=True)``) is the difference of two readings.

The loop's wait is measured where the loop waits: in the dataset's own generator when it is
iterated in the main process, and, with DataLoader workers, around the DataLoader iterator's
``next()`` (see :func:`~torch_tfrecord.data.internals.time_batches`), attached when the loader
starts its workers. ``TORCH_TFRECORD_TELEMETRY=0`` (read when a dataset is built) turns all of it
off: no shared memory, and no clock is read.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import get_worker_info

from ..support.stages import (
    FIELDS,
    FIRST_COUNT,
    FIRST_NS,
    HISTOGRAM,
    LOOP_COUNT,
    LOOP_NS,
    LOOP_SPAN,
    WORKER_SPAN,
    ThreadRecord,
    bucket,
    swap,
)
from .internals import loader_starting, time_batches
from .load_stats import LoadStats, summarize, write_chrome_trace

__all__ = [
    "ENV_VAR",
    "SLOTS",
    "TRACED",
    "LoopMeter",
    "Telemetry",
    "enabled",
    "telemetry_of",
    "watch_starting_loader",
]

ENV_VAR = "TORCH_TFRECORD_TELEMETRY"
SLOTS = 65
"""The main process and 64 workers; workers past them are not counted."""
TRACED = 17
"""Processes whose recent spans a trace keeps: the main process and the first 16 workers."""
RING = 512  # spans kept per traced process, the most recent
_TRACING = 0  # header: a trace is recording (0 / 1)
_HEAD = 4
_PID, _FLUSHED, _STARTED, _RING_COUNT = range(4)  # each slot's own header
_SLOT_HEAD = 4
_SLOT = _SLOT_HEAD + FIELDS
_SIZE = _HEAD + SLOTS * _SLOT + TRACED * RING * 3
_FLUSH_NS = 50_000_000
_TRACE_FLUSH_NS = 5_000_000
T = TypeVar("T")
Int64s = npt.NDArray[np.int64]


def enabled() -> bool:
    """Whether datasets built now keep telemetry (``TORCH_TFRECORD_TELEMETRY`` is not ``0``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "off", "no")


class _Process:
    """This process's side of a dataset's telemetry: its threads' records and its slot."""

    def __init__(self, array: Int64s, slot: int) -> None:
        self.pid = os.getpid()
        self.array = array
        self.slot = array[_HEAD + slot * _SLOT : _HEAD + (slot + 1) * _SLOT]
        start = _HEAD + SLOTS * _SLOT + slot * RING * 3
        self.ring = array[start : start + RING * 3].reshape(RING, 3) if slot < TRACED else None
        self.loop_span = LOOP_SPAN if slot == 0 else WORKER_SPAN
        self.lock = threading.Lock()
        self.loops: dict[int, ThreadRecord] = {}  # the loop threads' records, by thread
        self.others: list[ThreadRecord] = []  # loading threads' (prefetch), retired as they end
        self.retired = [0] * FIELDS
        self.base: Int64s | None = None  # the slot's totals before this process
        self.started = 0
        self.last = 0  # when the loop last received an item
        self.ended = False  # the loop's pass has ended (the window then ends at ``last``)
        self.flush_at = 0
        self.tracing = self.ring is not None and bool(array[_TRACING])

    def loop_record(self) -> ThreadRecord:
        """This thread's record as a loop (kept for the process's life)."""
        ident = threading.get_ident()
        record = self.loops.get(ident)
        if record is None:
            with self.lock:
                record = self.loops[ident] = ThreadRecord(self.tracing)
        return record

    def loading_record(self) -> ThreadRecord:
        """A record for a loading thread that ends (let go with :meth:`retire`)."""
        record = ThreadRecord(self.tracing)
        with self.lock:
            self.others.append(record)
        return record

    def retire(self, record: ThreadRecord) -> None:
        with self.lock:
            self.retired = [a + b for a, b in zip(self.retired, record.counts, strict=True)]
            self.others.remove(record)
            if record.spans:
                self._spans(record.spans)

    def took(self, record: ThreadRecord, elapsed: int, first: bool, start: int, now: int) -> None:
        """The loop received an item (main process: it waited ``elapsed``; a worker: it made one)."""
        counts = record.counts
        self.last, self.ended = now, False
        if not self.started:
            self.started = start
        if first:
            counts[FIRST_NS] += elapsed
            counts[FIRST_COUNT] += 1
        else:
            counts[LOOP_NS] += elapsed
            counts[LOOP_COUNT] += 1
            counts[HISTOGRAM + bucket(elapsed)] += 1
        if record.spans is not None:
            record.spans.append((record.code + self.loop_span, start, now))
        if now >= self.flush_at:
            self.flush(now)

    def flush(self, now: int) -> None:
        """Writes this process's totals into its slot (and a trace's new spans into its ring)."""
        with self.lock:
            records = [*self.loops.values(), *self.others]
            totals = np.array(self.retired, dtype=np.int64)
            for record in records:
                totals += np.array(record.counts, dtype=np.int64)
            slot = self.slot
            if self.base is None:  # the first flush: go on from whoever had the slot before
                before = int(slot[_PID])
                fresh = before in (0, self.pid)
                self.base = np.zeros(FIELDS, np.int64) if fresh else slot[_SLOT_HEAD:].copy()
                slot[_PID] = self.pid
            slot[_SLOT_HEAD:] = self.base + totals
            slot[_FLUSHED] = now
            if self.started and not slot[_STARTED]:
                slot[_STARTED] = self.started
            tracing = self.ring is not None and bool(self.array[_TRACING])
            for record in records:
                spans = record.spans
                if spans:
                    record.spans = []
                    self._spans(spans)
                if tracing != (record.spans is not None):
                    record.tracing(tracing)
            self.tracing = tracing
            # A trace's spans leave a worker often: what it has not written when the trace ends is lost.
            often = tracing and self.loop_span == WORKER_SPAN
            self.flush_at = now + (_TRACE_FLUSH_NS if often else _FLUSH_NS)

    def _spans(self, spans: list[tuple[int, int, int]]) -> None:
        if self.ring is None:
            return
        kept = np.asarray(spans[-RING:], dtype=np.int64).reshape(-1, 3)
        count = int(self.slot[_RING_COUNT])
        self.ring[(count + np.arange(len(kept))) % RING] = kept
        self.slot[_RING_COUNT] = count + len(kept)


class LoopMeter:
    """The loop's side of one pass in one process: each ``next()`` timed, from the loop's ask
    (:meth:`asked`) to the item being ready (:meth:`ready`), the stages in between counted.

    In sample mode, ``per`` samples (the loader's batch) make one wait.
    """

    __slots__ = ("first", "items", "opened", "pending", "per", "previous", "process", "record", "start")

    def __init__(self, process: _Process, per: int) -> None:
        self.process = process
        self.record = process.loop_record()
        self.per = per
        self.previous: ThreadRecord | None = None
        self.start = self.pending = self.items = 0
        self.first = True
        self.opened = False

    def asked(self) -> None:
        self.previous = swap(self.record)
        self.opened = True
        self.start = perf_counter_ns()

    def ready(self) -> None:
        now = perf_counter_ns()
        swap(self.previous)
        self.opened = False
        self.pending += now - self.start
        self.items += 1
        if self.items % self.per == 0:
            self.process.took(self.record, self.pending, self.first, self.start, now)
            self.first = False
            self.pending = 0

    def close(self) -> None:
        """The pass ended (or was left): the last ask is no wait for an item; totals written."""
        if self.opened:
            swap(self.previous)
            self.opened = False
        self.process.ended = True
        self.process.flush(perf_counter_ns())


class _NoMeter:
    __slots__ = ()

    def asked(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def close(self) -> None:
        pass


_NO_METER = _NoMeter()


class Telemetry:
    """A dataset's load telemetry (see the module's docstring); picklable with the dataset."""

    def __init__(self) -> None:
        self.shared: torch.Tensor | None = None
        if enabled():
            self.shared = torch.zeros(_SIZE, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._setup()

    def _setup(self) -> None:
        self._process: _Process | None = None
        self._baseline: Int64s | None = None  # the totals at the last reset (main process)
        self._reset_ns = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.shared = state["shared"]
        self._setup()

    def local(self) -> _Process | None:
        """This process's side (None: telemetry is off, or a worker past :data:`SLOTS`)."""
        process = self._process
        if process is not None and process.pid == os.getpid():
            return process
        if self.shared is None:
            return None
        info = get_worker_info()
        slot = 0 if info is None else 1 + info.id
        if slot >= SLOTS:
            return None
        self._process = process = _Process(self.shared.numpy(), slot)
        return process

    def meter(self, per: int | None) -> LoopMeter | _NoMeter:
        """The loop's meter for a pass in this thread."""
        process = self.local()
        return _NO_METER if process is None else LoopMeter(process, per or 1)

    def recording(self, loads: Iterator[T]) -> Iterator[T]:
        """``loads``, counting its stages in whichever thread runs it (a prefetch thread)."""
        process = self.local()
        return loads if process is None else _recording(process, loads)

    def fetch(self, function: Callable[[Any], T], iterator: Any, first: bool) -> T:
        """A DataLoader iterator's ``next()`` in the main process, timed as the loop's wait."""
        process = self.local()
        if process is None:
            return function(iterator)
        record = process.loop_record()
        previous = swap(record)
        start = perf_counter_ns()
        try:
            item = function(iterator)
        except StopIteration:
            process.ended = True
            raise
        finally:
            swap(previous)
        now = perf_counter_ns()
        process.took(record, now - start, first, start, now)
        return item

    def watch(self, iterator: Any) -> None:
        """Times the ``next()`` of a DataLoader iterator starting its workers over this dataset."""
        if self.shared is not None:
            time_batches(iterator, self.fetch)

    def stats(self, reset: bool = False) -> LoadStats:
        """The window's :class:`LoadStats` (since the last reset); ``reset``: a new window starts."""
        now = perf_counter_ns()
        if self.shared is None:
            return summarize(None, None, None, 0.0, [])
        array = self.shared.numpy()
        end = now
        process = self.local()
        if process is not None:
            process.flush(now)
            if process.ended and process.last:  # the loop's pass is over: so is the window
                end = max(process.last, self._reset_ns)
        slots = array[_HEAD : _HEAD + SLOTS * _SLOT].reshape(SLOTS, _SLOT).copy()
        totals = slots[:, _SLOT_HEAD:]
        window = totals if self._baseline is None else np.maximum(totals - self._baseline, 0)
        start = self._window_start(slots)
        seconds = max(0, end - start) / 1e9 if start else 0.0
        stats = summarize(window, totals, slots[:, _PID], seconds, self._spans(array, slots, start))
        if reset:
            self._baseline, self._reset_ns = totals, now
        return stats

    def _window_start(self, slots: Int64s) -> int:
        """The last reset, else the loop's first ``next()`` (else a worker's first batch)."""
        if self._reset_ns:
            return self._reset_ns
        started = slots[:, _STARTED]
        if started[0]:
            return int(started[0])
        found = started[started > 0]
        return int(found.min()) if len(found) else 0

    def _spans(self, array: Int64s, slots: Int64s, since: int) -> list[tuple[int, int, int, int, int]]:
        """``(slot, pid, code, start, end)`` of the rings' spans that end after ``since``."""
        found: list[tuple[int, int, int, int, int]] = []
        for slot in range(TRACED):
            kept = min(int(slots[slot, _RING_COUNT]), RING)
            if not kept:
                continue
            start = _HEAD + SLOTS * _SLOT + slot * RING * 3
            ring = array[start : start + RING * 3].reshape(RING, 3)[:kept]
            pid = int(slots[slot, _PID])
            kept_spans = ring[ring[:, 2] >= since].tolist()
            found.extend((slot, pid, code, start, end) for code, start, end in kept_spans)
        return found

    @contextlib.contextmanager
    def trace(self, path: str | os.PathLike[str]) -> Iterator[None]:
        """Records spans in every process while inside; writes them to ``path`` on the way out."""
        if self.shared is None:
            raise ValueError(f"load telemetry is off ({ENV_VAR}=0): there is nothing to trace")
        array = self.shared.numpy()
        start = perf_counter_ns()
        array[_TRACING] = 1
        process = self.local()
        if process is not None:
            process.flush(start)
        try:
            yield
        finally:
            array[_TRACING] = 0
            now = perf_counter_ns()
            process = self.local()
            if process is not None:
                process.flush(now)
            slots = array[_HEAD : _HEAD + SLOTS * _SLOT].reshape(SLOTS, _SLOT)
            spans = [span for span in self._spans(array, slots, start) if span[3] <= now]
            write_chrome_trace(path, spans)


def _recording(process: _Process, loads: Iterator[T]) -> Iterator[T]:
    record = process.loading_record()
    previous = swap(record)
    try:
        yield from loads
    finally:
        swap(previous)
        process.retire(record)


def telemetry_of(dataset: Any) -> Telemetry | None:
    """The telemetry of one of our datasets, or of one a framework wrapped (``.dataset``)."""
    for candidate in (dataset, getattr(dataset, "dataset", None)):
        found = getattr(candidate, "_telemetry", None)
        if isinstance(found, Telemetry):
            return found
    return None


def watch_starting_loader() -> None:
    """Called as a process forks or pickles a dataset: if a DataLoader iterator among the callers
    is starting its workers, its ``next()`` is timed for its dataset's telemetry."""
    found = loader_starting()
    if found is not None:
        iterator, dataset = found
        telemetry = telemetry_of(dataset)
        if telemetry is not None:
            telemetry.watch(iterator)


def _before_fork() -> None:
    try:
        watch_starting_loader()
    except Exception:  # a fork must never fail for telemetry's sake
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)
