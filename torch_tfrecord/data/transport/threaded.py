"""Several batches made at once by threads of the process iterating a dataset, handed out in order.

The native steps of loading a batch (reading, CRCs, decoding Examples and images, assembling the
columns) run with the GIL released, so N threads of one process make N batches at the same time,
with nothing to hand off between processes. :class:`OrderedThreads` runs the *tasks* of an
iterator (one per batch of the epoch, in the epoch's order: each a call that loads it) on N
threads and hands their results out in the tasks' order:

- the same items in the same order whatever N: task ``k`` is the epoch's batch ``k``, whichever
  thread made it and whenever it was ready;
- bounded: at most ``depth`` tasks taken and not yet handed out (being made, or made and waiting);
- what the consumer has *received* is all it can see (the caller counts progress on its side);
- errors: an exception of task ``k`` (or of the iterator) is raised to the consumer, the same
  object, after the items before it; no task after it starts, and the threads end;
- shutdown: :meth:`~OrderedThreads.close` (also on garbage collection of an abandoned iterator,
  at the end, and at the interpreter's exit, as for :mod:`.prefetch`) stops every thread after
  the task it is in and joins them, so no thread outlives the loop;
- fork: a fork waits until no thread is inside a task or the iterator (see :mod:`.prefetch`).

The iterator itself is advanced by one thread at a time, and closed by the last thread to end
(a generator's cleanup runs in a thread that ran it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from ..decoding import on_loading_thread
from ..telemetry.shared import Telemetry
from .prefetch import Busy, Prefetcher, close_at_exit, closed
from .runs import ends

__all__ = ["OrderedThreads", "ahead", "check_prefetch", "check_threads"]

T = TypeVar("T")
Task = Callable[[], T]


def check_prefetch(prefetch: int) -> int:
    """``prefetch`` checked: an int >= 0."""
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"{prefetch=} must be an int >= 0")
    return prefetch


def check_threads(threads: int, transform_threads: bool) -> int:
    """``threads`` checked: an int >= 0 (``transform_threads`` needs at least one)."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"{threads=} must be an int >= 0")
    if not isinstance(transform_threads, bool):
        raise ValueError(f"{transform_threads=} must be a bool")
    if transform_threads and not threads:
        raise ValueError(
            "transform_threads=True runs the transform on the loading threads: give threads >= 1"
        )
    return threads


_END = object()  # no item in this place: the tasks are over


def ahead(
    tasks: Iterator[Task[T]], threads: int, prefetch: int, telemetry: Telemetry
) -> OrderedThreads[T] | Prefetcher[T] | Generator[T, None, None]:
    """The items of ``tasks`` as a pass iterates them: made by ``threads`` threads, at most
    ``threads + prefetch`` ahead of the loop; with no threads, by one prefetch thread
    ``prefetch`` ahead, or (neither) in the loop's own thread when it asks. Close it when done."""
    if threads:

        @contextlib.contextmanager
        def setup() -> Iterator[None]:
            with telemetry.loading(), on_loading_thread():
                yield

        return OrderedThreads(tasks, threads, threads + prefetch, setup)
    made = _made(tasks)
    return Prefetcher(telemetry.recording(made), prefetch) if prefetch else made


def _made(tasks: Iterator[Task[T]]) -> Generator[T, None, None]:
    # (no cleanup of its own: closed at the interpreter's exit, it runs after modules are torn down)
    for task in tasks:  # (never runs of batches: those go only where a thread hands them over)
        yield task()


def _close_tasks_of(tasks: Any) -> None:
    close = getattr(tasks, "close", None)
    if close is not None:
        close()


class _Raised:
    """An exception of a task (or of the iterator), carried to the consumer."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Shared:
    """What the threads share with the consumer (not the consumer's object, which may be collected)."""

    def __init__(self, tasks: Iterator[Task[Any]], depth: int) -> None:
        self.tasks: Iterator[Task[Any]] | None = tasks
        self.depth = depth
        self.changed = threading.Condition()
        self.pulling = threading.Lock()  # one thread at a time advances the iterator
        self.results: dict[int, object] = {}  # made, not yet handed out, by place
        self.taken = 0  # tasks taken from the iterator
        self.handed = 0  # results handed to the consumer
        self.end: int | None = None  # how many tasks there are (known at the iterator's end, or an error)
        self.stop = False
        self.alive = 0  # threads not yet ended


class OrderedThreads(Generic[T]):
    """Runs the tasks of ``tasks`` on ``threads`` threads; iterating it gives their results in order.

    The threads start at the first ``next()``. Use it as an iterator; :meth:`close` it (or let it
    be collected) to stop early.

    Args:
        tasks: calls that each make one item, in the order wanted; advanced only by the threads.
        threads: how many threads (at least 1).
        depth: tasks taken and not yet handed out at most (at least ``threads``).
        setup: entered by each thread around its work (e.g. a telemetry record of its own).
        name: the threads' name (numbered).

    Example:
        >>> tasks = (lambda n=n: n * n for n in range(6))
        >>> with OrderedThreads(tasks, threads=3, depth=4) as squares:
        ...     list(squares)
        [0, 1, 4, 9, 16, 25]
    """

    def __init__(
        self,
        tasks: Iterator[Task[T]],
        threads: int,
        depth: int,
        setup: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
        name: str = "torch_tfrecord-load",
    ) -> None:
        if threads < 1 or depth < threads:
            raise ValueError(f"{threads=} must be at least 1 and {depth=} at least threads")
        self._shared = _Shared(tasks, depth)
        self._count = threads
        self._setup = setup
        self._name = name
        self._threads: list[threading.Thread] | None = None
        self._done = self._closed = False

    def __iter__(self) -> OrderedThreads[T]:
        return self

    def __enter__(self) -> OrderedThreads[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start(self) -> None:
        shared = self._shared
        shared.alive = self._count
        self._threads = [
            threading.Thread(target=_run, args=(shared, self._setup), name=f"{self._name}-{i}", daemon=True)
            for i in range(self._count)
        ]
        close_at_exit(self)
        for thread in self._threads:
            thread.start()

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        if self._threads is None:
            self._start()
        shared = self._shared
        with shared.changed:
            while shared.handed not in shared.results and (shared.end is None or shared.handed < shared.end):
                shared.changed.wait()
            item = shared.results.pop(shared.handed, _END)
            if item is not _END:
                shared.handed += 1
                shared.changed.notify_all()  # room for another task
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Raised):
            self.close()
            raise item.error
        return item  # type: ignore[return-value]

    def close(self, deadline: float | None = None) -> None:
        """Stops the threads (each after the task it is in) and joins them; idempotent.
        ``deadline`` (a ``time.monotonic()``): stop waiting for them then."""
        if self._closed:  # (may be called again after the interpreter's exit closed it: no globals)
            return
        self._done = self._closed = True
        shared = self._shared
        threads, self._threads = self._threads, None
        with shared.changed:
            shared.stop = True
            shared.results.clear()  # let go of made items at once
            shared.changed.notify_all()
        if threads is None:  # never started: the iterator is closed here
            _close_tasks(shared)
            return
        closed(self)
        for thread in threads:
            if thread is threading.current_thread():
                continue  # collected inside a thread of its own: it ends by itself
            while thread.is_alive() and (deadline is None or time.monotonic() < deadline):
                thread.join(timeout=0.05)

    def __del__(self) -> None:
        if hasattr(self, "_shared"):  # not when __init__ refused its arguments
            self.close()


def _close_tasks(shared: _Shared) -> None:
    tasks, shared.tasks = shared.tasks, None
    _close_tasks_of(tasks)


def _take(shared: _Shared, busy: Busy) -> tuple[int, Task[Any]] | None:
    """The next task and its place, once there is room for it; None when there is none to run."""
    with shared.pulling:
        with shared.changed:
            while not shared.stop and shared.taken - shared.handed >= shared.depth:
                shared.changed.wait()
            place = shared.taken
            if shared.stop or (shared.end is not None and place >= shared.end) or shared.tasks is None:
                return None
        try:
            with busy.lock:
                task = next(shared.tasks, None)
        except BaseException as error:  # the iterator's own error: raised in its place
            with shared.changed:
                shared.results[place] = _Raised(error)
                shared.taken = place + 1
                shared.end = place + 1
                shared.changed.notify_all()
            return None
        with shared.changed:
            if task is None:
                shared.end = place if shared.end is None else min(shared.end, place)
                shared.changed.notify_all()
                return None
            shared.taken = place + 1
        return place, task


def _run(shared: _Shared, setup: Callable[[], AbstractContextManager[Any]]) -> None:
    busy = Busy()
    busy.running()
    try:
        with setup():
            while True:
                taken = _take(shared, busy)
                if taken is None:
                    return
                place, task = taken
                outcome: object
                try:
                    with busy.lock:
                        outcome = task()
                except BaseException as error:  # handed to the consumer, which raises it
                    outcome = _Raised(error)
                with shared.changed:
                    if isinstance(outcome, _Raised) or ends(outcome):  # nothing after it is needed
                        shared.end = place + 1 if shared.end is None else min(shared.end, place + 1)
                    if not shared.stop:  # (not over the error a failed setup put here)
                        shared.results.setdefault(place, outcome)
                    shared.changed.notify_all()
                del outcome, task, taken  # (an item let go of here is not kept until the next)
    except BaseException as error:  # the setup's own: raised in the first place not yet made
        with shared.changed:
            place = shared.handed
            while place in shared.results:
                place += 1
            shared.results[place] = _Raised(error)
            shared.end = place + 1 if shared.end is None else min(shared.end, place + 1)
            shared.changed.notify_all()
    finally:
        busy.ended()
        with shared.changed:
            shared.alive -= 1
            last = shared.alive == 0
        if last:
            with shared.pulling:
                _close_tasks(shared)
