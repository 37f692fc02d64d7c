"""A dataset's load telemetry: each process's stage counters in shared memory, the loop's wait in
``next()``, and a trace of the stages on demand, read by ``dataset.stats()`` in the main process.

One small int64 tensor per dataset (18 KB), made when the dataset is built and shared with
DataLoader workers however they start (as :mod:`..epoch.counter` shares its counts): a header, then
a *slot* per process (the main process, with the histogram of the loop's waits, then worker ``k``
in slot ``1 + k``; see :mod:`.counters`). Each process sums its threads' counters
(:class:`~torch_tfrecord.support.stages.ThreadRecord`) into its own slot, at most every 50 ms and
when a pass ends; only the main process reads the others' slots. A slot holds totals since the
dataset was made: a worker of a later pass goes on from the totals its slot holds, so every counter
only grows, and a window (``stats(reset=True)``) is the difference of two readings.

The loop's wait is measured where the loop waits: in the dataset's own generator when it is
iterated in the main process, and, with DataLoader workers, around the DataLoader iterator's
``next()`` (see :func:`~torch_tfrecord.data.frameworks.internals.time_batches`), attached when the loader
starts its workers.

A trace (:meth:`Telemetry.trace`) sets a flag in the header: while it is up, each process keeps its
threads' spans and appends them to a file of its own in a temporary directory that the main process
made (at most :data:`~.counters.TRACE_SPANS` spans each), which the main process reads and
removes when the trace ends. ``TORCH_TFRECORD_TELEMETRY=0`` (read when a dataset is built) turns
all of it off: no shared memory, and no clock is read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import get_worker_info

from ...support.stages import FIELDS, current, swap
from ..frameworks.internals import loader_starting, time_batches
from .counters import (
    PID,
    PROCESS_SLOT,
    SIZE,
    SLOT_HEAD,
    SLOTS,
    STARTED,
    TOKEN,
    TRACING,
    BatchMeter,
    NoMeter,
    ProcessCounters,
    SampleMeter,
    slot_range,
    trace_dir,
)
from .stats import LoadStats, Span, summarize, write_chrome_trace

__all__ = ["ENV_VAR", "Observed", "Telemetry", "enabled", "telemetry_of", "watch_starting_loader"]

ENV_VAR = "TORCH_TFRECORD_TELEMETRY"
T = TypeVar("T")
Int64s = npt.NDArray[np.int64]
_NO_METER = NoMeter()


def enabled() -> bool:
    """Whether datasets built now keep telemetry (``TORCH_TFRECORD_TELEMETRY`` is not ``0``)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "off", "no")


class Telemetry:
    """A dataset's load telemetry (see the module's docstring); picklable with the dataset."""

    def __init__(self) -> None:
        self.shared: torch.Tensor | None = None
        if enabled():
            self.shared = torch.zeros(SIZE, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._setup()

    def _setup(self) -> None:
        self._process: ProcessCounters | None = None
        self._baseline: Int64s | None = None  # the totals at the last reset (main process)
        self._reset_ns = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.shared = state["shared"]
        self._setup()

    def local(self) -> ProcessCounters | None:
        """This process's side (None: telemetry is off, or a worker past the slots)."""
        process = self._process
        if process is not None and process.pid == os.getpid():
            return process
        if self.shared is None:
            return None
        info = get_worker_info()
        slot = 0 if info is None else 1 + info.id
        if slot >= PROCESS_SLOT:
            return None
        self._process = process = ProcessCounters(self.shared.numpy(), slot)
        return process

    def as_loading_process(self) -> None:
        """This process is the loading process of ``process=True``: it counts in its own slot."""
        if self.shared is not None:
            self._process = ProcessCounters(self.shared.numpy(), PROCESS_SLOT)

    def meter(self, per: int | None) -> BatchMeter | NoMeter:
        """The loop's meter for a pass in this thread (``per``: samples a loader's batch)."""
        process = self.local()
        if process is None:
            return _NO_METER
        return BatchMeter(process) if (per or 1) == 1 else SampleMeter(process, per or 1)

    def recording(self, loads: Iterator[T]) -> Iterator[T]:
        """``loads``, counting its stages in whichever thread runs it (a prefetch thread)."""
        return loads if self.local() is None else _recording(self, loads)

    @contextlib.contextmanager
    def loading(self) -> Iterator[None]:
        """Counts the stages of the current thread inside, as a loading thread of its own (one of
        a dataset's ``threads=``, a prefetch thread)."""
        process = self.local()
        if process is None:
            yield
            return
        record = process.loading_record()
        previous = swap(record)
        try:
            yield
        finally:
            swap(previous)
            process.retire(record)

    def fetch(self, function: Callable[[Any], T], iterator: Any, first: bool) -> T:
        """A DataLoader iterator's ``next()`` in the main process, timed as the loop's wait."""
        process = self.local()
        if process is None:
            return function(iterator)
        record = process.loop_record()
        if current() is not record:
            swap(record)  # (the loop thread's record stays current, paused between batches)
        record.paused = False
        start = perf_counter_ns()
        try:
            item = function(iterator)
        except StopIteration:
            process.ended_at = process.last
            raise
        finally:
            record.paused = True
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
            if process.last and process.ended_at == process.last:  # the loop's pass is over: so is the window
                end = max(process.last, self._reset_ns)
        heads, totals = _read_slots(self.shared.numpy())
        window = totals if self._baseline is None else np.maximum(totals - self._baseline, 0)
        start = self._reset_ns or _first_start(heads[:, STARTED])
        seconds = max(0, end - start) / 1e9 if start else 0.0
        stats = summarize(window, totals, heads[:, PID], seconds)
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
        directory = trace_dir(token)
        os.makedirs(directory, mode=0o700)
        start = perf_counter_ns()
        array[TOKEN], array[TRACING] = token, 1
        process = self.local()
        if process is not None:
            process.flush(start)
        try:
            yield
        finally:
            array[TRACING] = 0
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
    heads = np.zeros((SLOTS, SLOT_HEAD), dtype=np.int64)
    totals = np.zeros((SLOTS, FIELDS), dtype=np.int64)
    for slot in range(SLOTS):
        at, width = slot_range(slot)
        heads[slot] = array[at : at + SLOT_HEAD]
        totals[slot, :width] = array[at + SLOT_HEAD : at + SLOT_HEAD + width]
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


def _recording(telemetry: Telemetry, loads: Iterator[T]) -> Iterator[T]:
    with telemetry.loading():
        yield from loads


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


class Observed:
    """``stats()`` and ``trace()`` of a dataset whose loading its :class:`Telemetry` counts."""

    _telemetry: Telemetry

    def stats(self, reset: bool = False) -> LoadStats:
        """Is the training loop waiting on data, and if so, on which stage: a :class:`LoadStats`,
        the same for every dataset (what a packing or bucketing did: ``pack_stats()``,
        ``bucket_stats()``).

        Counted all along at a small cost (``TORCH_TFRECORD_TELEMETRY=0`` turns it off), in
        every process, DataLoader workers included; call it in the main process.

        Args:
            reset: start a new window after this one (the next call covers what comes after).

        Example:
            >>> stats = dataset.stats(reset=True)  # doctest: +SKIP
            >>> print(stats)  # doctest: +SKIP
            >>> stats.bottleneck, stats.wait_share  # doctest: +SKIP
            ('image_decode', 0.61)
        """
        return self._telemetry.stats(reset)

    def trace(self, path: str | os.PathLike[str]) -> contextlib.AbstractContextManager[None]:
        """Records each stage of loading in every process while inside the ``with`` block, then
        writes them to ``path`` as Chrome / Perfetto trace JSON (ui.perfetto.dev, chrome://tracing).

        Keeps the most recent 512 spans of the main process and of each of the first 16 workers;
        workers start recording within 50 ms.

        Example:
            >>> with dataset.trace("load-trace.json"):  # doctest: +SKIP
            ...     for _, batch in zip(range(50), loader): train(batch)

        Raises:
            ValueError: telemetry is off (``TORCH_TFRECORD_TELEMETRY=0``).
        """
        return self._telemetry.trace(path)
