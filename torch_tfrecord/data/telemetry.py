"""A dataset's load telemetry: each process's stage counters in shared memory, the loop's wait in
``next()``, and a trace of the stages on demand, read by ``dataset.stats()`` in the main process.

One small int64 tensor per dataset (18 KB), made when the dataset is built and shared with
DataLoader workers however they start (as :mod:`.epoch_counter` shares its counts): a header, then
a *slot* per process (the main process, with the histogram of the loop's waits, then worker ``k``
in slot ``1 + k``). Each process sums its threads' counters
(:class:`~torch_tfrecord.support.stages.ThreadRecord`) into its own slot, at most every 50 ms and
when a pass ends; only the main process reads the others' slots. A slot holds totals since the
dataset was made: a worker of a later pass goes on from the totals its slot holds, so every counter
only grows, and a window (``stats(reset=True)``) is the difference of two readings.

The loop's wait is measured where the loop waits: in the dataset's own generator when it is
iterated in the main process, and, with DataLoader workers, around the DataLoader iterator's
``next()`` (see :func:`~torch_tfrecord.data.internals.time_batches`), attached when the loader
starts its workers.

A trace (:meth:`Telemetry.trace`) sets a flag in the header: while it is up, each process keeps its
threads' spans and appends them to a file of its own in a temporary directory that the main process
made (at most :data:`TRACE_SPANS` spans each), which the main process reads and removes when the
trace ends. ``TORCH_TFRECORD_TELEMETRY=0`` (read when a dataset is built) turns all of it off: no
shared memory, and no clock is read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
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
from .load_stats import LoadStats, Span, summarize, write_chrome_trace

__all__ = [
    "ENV_VAR",
    "SLOTS",
    "TRACE_SPANS",
    "LoopMeter",
    "Telemetry",
    "enabled",
    "telemetry_of",
    "watch_starting_loader",
]

ENV_VAR = "TORCH_TFRECORD_TELEMETRY"
SLOTS = 65
"""The main process and 64 workers; workers past them are not counted."""
TRACE_SPANS = 1 << 16
"""Spans a process writes in one trace at most (1.5 MB); later ones are left out."""
_TRACING, _TOKEN = 0, 1  # the header: a trace is recording (0 / 1), and its directory's number
_HEAD = 4
_PID, _FLUSHED, _STARTED = range(3)  # each slot's own header
_SLOT_HEAD = 4
_MAIN = _SLOT_HEAD + FIELDS  # the main process's slot, its histogram of waits included
_WORKER = _SLOT_HEAD + HISTOGRAM  # a worker's slot: no histogram
_SIZE = _HEAD + _MAIN + (SLOTS - 1) * _WORKER
_FLUSH_NS = 50_000_000
_TRACE_FLUSH_NS = 5_000_000
T = TypeVar("T")
Int64s = npt.NDArray[np.int64]


def enabled() -> bool:
    """Whether datasets built now keep telemetry (``TORCH_TFRECORD_TELEMETRY`` is not ``0``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "off", "no")


def _slot_range(slot: int) -> tuple[int, int]:
    """Where slot ``slot`` lies in the tensor, and how many counters it keeps."""
    if slot == 0:
        return _HEAD, FIELDS
    return _HEAD + _MAIN + (slot - 1) * _WORKER, HISTOGRAM


def _trace_dir(token: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"torch-tfrecord-trace-{token:016x}")


class _Process:
    """This process's side of a dataset's telemetry: its threads' records and its slot."""

    def __init__(self, array: Int64s, slot: int) -> None:
        self.pid = os.getpid()
        self.array = array
        at, self.width = _slot_range(slot)
        self.slot = array[at : at + _SLOT_HEAD + self.width]
        self.number = slot
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
        self.token = int(array[_TOKEN]) if array[_TRACING] else 0  # the trace being recorded
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
        """Writes this process's totals into its slot (and a trace's new spans to its file)."""
        with self.lock:
            records = [*self.loops.values(), *self.others]
            totals = np.array(self.retired[: self.width], dtype=np.int64)
            for record in records:
                totals += np.array(record.counts[: self.width], dtype=np.int64)
            slot = self.slot
            if self.base is None:  # the first flush: go on from whoever had the slot before
                fresh = int(slot[_PID]) in (0, self.pid)
                self.base = np.zeros(self.width, np.int64) if fresh else slot[_SLOT_HEAD:].copy()
                slot[_PID] = self.pid
            slot[_SLOT_HEAD:] = self.base + totals
            slot[_FLUSHED] = now
            if self.started and not slot[_STARTED]:
                slot[_STARTED] = self.started
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
        token = int(self.array[_TOKEN]) if self.array[_TRACING] else 0
        if token != self.token:
            self.token, self.written = token, 0
            for record in records:
                record.tracing(bool(token))

    def _write_spans(self, spans: list[tuple[int, int, int]]) -> None:
        room = TRACE_SPANS - self.written
        if not self.token or room <= 0:
            return
        kept = np.asarray(spans[:room], dtype=np.int64)
        path = os.path.join(_trace_dir(self.token), f"{self.number}-{self.pid}.spans")
        try:
            with open(path, "ab") as out:  # (no directory: the trace has ended)
                kept.tofile(out)
        except OSError:
            return
        self.written += len(kept)


class LoopMeter:
    """The loop's side of one pass in one process: each ``next()`` timed, from the loop's ask
    (:meth:`asked`) to the item being ready (:meth:`ready`), the stages in between counted.

    In sample mode, a run of ``per`` samples (the loader's batch) is one wait, timed from the
    run's first ask to its last sample: within a run, two attribute updates a sample.
    """

    __slots__ = ("first", "left", "opened", "per", "previous", "process", "record", "start")

    def __init__(self, process: _Process, per: int) -> None:
        self.process = process
        self.record = process.loop_record()
        self.per = self.left = per
        self.previous: ThreadRecord | None = None
        self.start = 0
        self.first = True
        self.opened = False

    def asked(self) -> None:
        if self.opened:  # within a run of samples
            return
        self.previous = swap(self.record)
        self.opened = True
        self.start = perf_counter_ns()

    def ready(self) -> None:
        self.left -= 1
        if self.left:
            return
        now = perf_counter_ns()
        swap(self.previous)
        self.opened = False
        self.left = self.per
        self.process.took(self.record, now - self.start, self.first, self.start, now)
        self.first = False

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
            return summarize(None, None, None, 0.0)
        end = now
        process = self.local()
        if process is not None:
            process.flush(now)
            if process.ended and process.last:  # the loop's pass is over: so is the window
                end = max(process.last, self._reset_ns)
        heads, totals = _read_slots(self.shared.numpy())
        window = totals if self._baseline is None else np.maximum(totals - self._baseline, 0)
        start = self._reset_ns or _first_start(heads[:, _STARTED])
        seconds = max(0, end - start) / 1e9 if start else 0.0
        stats = summarize(window, totals, heads[:, _PID], seconds)
        if reset:
            self._baseline, self._reset_ns = totals, now
        return stats

    @contextlib.contextmanager
    def trace(self, path: str | os.PathLike[str]) -> Iterator[None]:
        """Records spans in every process while inside; writes them to ``path`` on the way out."""
        if self.shared is None:
            raise ValueError(f"load telemetry is off ({ENV_VAR}=0): there is nothing to trace")
        array = self.shared.numpy()
        token = int.from_bytes(os.urandom(7), "little") or 1
        directory = _trace_dir(token)
        os.makedirs(directory, mode=0o700)
        start = perf_counter_ns()
        array[_TOKEN], array[_TRACING] = token, 1
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
                process.flush(now)  # (writes its last spans, and stops keeping them)
            try:
                spans = _read_spans(directory, start, now)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            write_chrome_trace(path, spans)


def _read_slots(array: Int64s) -> tuple[Int64s, Int64s]:
    """Each slot's header and counters (a worker's histogram: zeros), one row per process."""
    heads = np.zeros((SLOTS, _SLOT_HEAD), dtype=np.int64)
    totals = np.zeros((SLOTS, FIELDS), dtype=np.int64)
    for slot in range(SLOTS):
        at, width = _slot_range(slot)
        heads[slot] = array[at : at + _SLOT_HEAD]
        totals[slot, :width] = array[at + _SLOT_HEAD : at + _SLOT_HEAD + width]
    return heads, totals


def _first_start(started: Int64s) -> int:
    """The loop's first ``next()`` (else a worker's first batch): where a window without reset starts."""
    if started[0]:
        return int(started[0])
    found = started[started > 0]
    return int(found.min()) if len(found) else 0


def _read_spans(directory: str, start: int, end: int) -> list[Span]:
    """The spans the processes wrote in ``directory`` (``SLOT-PID.spans``) within ``[start, end]``."""
    found: list[Span] = []
    for name in sorted(os.listdir(directory)):
        slot, _, pid = name.removesuffix(".spans").partition("-")
        spans = np.fromfile(os.path.join(directory, name), dtype=np.int64)
        spans = spans[: len(spans) // 3 * 3].reshape(-1, 3)
        spans = spans[(spans[:, 1] >= start) & (spans[:, 2] <= end)]
        found.extend((int(slot), int(pid), code, begin, until) for code, begin, until in spans.tolist())
    return found


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
