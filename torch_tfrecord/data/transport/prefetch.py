"""Loading ahead of the training loop in the main process: a thread runs an iterator, a queue bounds it.

With ``num_workers=0`` the loop and the loading take turns in one thread. The heavy steps of
loading (reading, the native decode, image decoding and resizing) run in compiled code with the
GIL released, so a background thread that drives them overlaps them with the loop's own work
(a training step is torch work, which releases the GIL too). :class:`Prefetcher` runs an
iterator in such a thread, at most ``depth`` items ahead of the consumer:

- bounded: at most ``depth`` items wait in the queue, one more is being made;
- exact: items arrive in the iterator's order, each once; what the consumer has *received* is
  all it can see (the caller counts progress on its side of the queue);
- errors: an exception raised by the iterator is raised to the consumer, the same object (its
  type, message and traceback), at the place in the order where it happened;
- shutdown: :meth:`close` (also on garbage collection of an abandoned iterator, and at the end)
  stops the thread and joins it, so no thread outlives the loop; a loop still open when the
  interpreter exits (``next(iter(dataset))`` in a script) is closed at exit, before Python
  tears its modules down: a thread left inside torch then was killed by the finalization with
  "terminate called without an active exception" (SIGABRT, exit status 134);
- fork: a process forked while a prefetch runs (a DataLoader starting its workers) is forked
  between two items, never while the thread is inside the iterator (holding a lock of the files
  it reads, or half-way through updating a decoder's state): ``os.fork`` waits for the item in
  progress. The child has no thread and never touches this one's queue.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .runs import ends

__all__ = ["Busy", "Prefetcher", "close_at_exit", "closed"]

T = TypeVar("T")

_END = object()  # the iterator is exhausted
# The "inside the iterator" lock of every running loading thread, taken around each fork.
_RUNNING: weakref.WeakSet[Busy] = weakref.WeakSet()


class Busy:
    """Held by a loading thread while it is inside its work (weakly referenceable): a fork
    waits for it (a prefetch thread's, or each of :mod:`.threaded`'s threads')."""

    __slots__ = ("__weakref__", "lock", "owner")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = 0  # the thread's ident

    def running(self) -> None:
        """The thread holding it from now on is this one (call it in the thread)."""
        self.owner = threading.get_ident()
        _RUNNING.add(self)

    def ended(self) -> None:
        """The thread has ended: forks wait for it no more."""
        _RUNNING.discard(self)


_held: list[Busy] = []  # the locks the fork in progress took
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()  # loops whose threads run (each with close(deadline))
_EXIT_WAIT_S = 30.0  # at exit, how long the loops still open may take to end the item in progress


def _before_fork() -> None:
    me = threading.get_ident()
    for busy in list(_RUNNING):
        if busy.owner != me:  # (an iterator that forks would otherwise wait for itself)
            busy.lock.acquire()  # waits for the item in progress
            _held.append(busy)


def _after_fork() -> None:
    while _held:
        _held.pop().lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def close_at_exit(loop: Any) -> None:
    """Closes ``loop`` (``loop.close(deadline)``) at the interpreter's exit if it is still open then
    (held weakly: a loop collected before is forgotten)."""
    _OPEN.add(loop)


def closed(loop: Any) -> None:
    """``loop`` was closed: nothing to do for it at exit."""
    _OPEN.discard(loop)


class _Raised:
    """An exception the iterator raised, carried through the queue."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[T]):
    """Iterates ``items`` in a background thread, at most ``depth`` items ahead of the consumer.

    The thread starts at the first ``next()``. Use it as an iterator; :meth:`close` it (or let it
    be collected) to stop early.

    Args:
        items: what to load ahead; it is advanced only by the background thread.
        depth: how many items may wait for the consumer (at least 1).
        name: the thread's name.

    Example:
        >>> with Prefetcher(iter(range(5)), depth=2) as ahead:
        ...     list(ahead)
        [0, 1, 2, 3, 4]
    """

    def __init__(self, items: Iterator[T], depth: int, name: str = "torch_tfrecord-prefetch") -> None:
        if depth < 1:
            raise ValueError(f"{depth=} must be at least 1")
        self._items: Iterator[T] | None = items
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._busy = Busy()
        self._thread: threading.Thread | None = None
        self._name = name
        self._done = False

    def __iter__(self) -> Prefetcher[T]:
        return self

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        if self._thread is None:
            # The thread holds the queue, the flag and the items, not this object: an abandoned
            # Prefetcher is collected (and its thread stopped) like any other object.
            self._thread = threading.Thread(
                target=_run,
                args=(self._items, self._queue, self._stop, self._busy),
                name=self._name,
                daemon=True,
            )
            _RUNNING.add(self._busy)
            close_at_exit(self)
            self._thread.start()
        item = self._queue.get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Raised):
            self.close()
            raise item.error
        return item  # type: ignore[return-value]

    def close(self, deadline: float | None = None) -> None:
        """Stops the thread (after the item it is making, if any) and joins it; idempotent.
        ``deadline`` (a ``time.monotonic()``): stop waiting for the thread then."""
        self._done = True
        thread, self._thread = self._thread, None
        if thread is None:
            self._items = None
            return
        closed(self)
        self._stop.set()
        # Emptied after the flag is set: the thread's pending put goes through, then it sees the flag.
        while thread.is_alive() and (deadline is None or time.monotonic() < deadline):
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
            if thread is not threading.current_thread():
                thread.join(timeout=0.05)
            else:  # collected inside the thread itself: it ends by itself at its next put
                break
        self._items = None
        while not self._queue.empty():  # let go of loaded items at once
            self._queue.get_nowait()

    def __del__(self) -> None:
        if hasattr(self, "_busy"):  # not when __init__ refused its arguments
            self.close()


@atexit.register
def _close_open_loops() -> None:
    """Closes the loops still open at the interpreter's exit (see the module's docstring)."""
    deadline = time.monotonic() + _EXIT_WAIT_S
    for prefetcher in list(_OPEN):
        prefetcher.close(deadline)


def _run(
    items: Iterator[object] | None, out: queue.Queue[object], stop: threading.Event, busy: Busy
) -> None:
    assert items is not None
    busy.running()
    try:
        while True:
            with busy.lock:
                item = next(items, _END)
            out.put(item)  # blocks while ``depth`` items wait: the bound
            if item is _END or stop.is_set():
                return
            if ends(item):  # a run that failed part-way: nothing after it is needed
                out.put(_END)
                return
    except BaseException as error:  # handed to the consumer, which raises it
        out.put(_Raised(error))
    finally:
        busy.ended()
        close = getattr(items, "close", None)
        if close is not None:
            with busy.lock:
                close()  # a generator's own cleanup runs in the thread that ran it
