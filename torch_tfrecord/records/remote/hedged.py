"""Remote requests that a slow answer cannot stall: deadlines and hedged requests, applied.

Each request runs in the background (on the file system's event loop where it is async, else on
a small pool) while the caller waits for the first of: its answer, its hedge point, its
deadline (:mod:`.deadlines` says when). Past the hedge point the same request is sent again,
on another connection, if the budget allows; the first answer wins and the other request is
cancelled (an async one is, and closes its connection) or, already running in a thread,
finishes unread: its bytes reach nobody. Past the deadline every copy is cancelled and the
read fails as a transient timeout, which :func:`.retry.retrying` retries with a longer deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...support.stages import DEADLINE_RETRIES, HEDGES_SENT, HEDGES_WON, count
from .deadlines import HedgeBudget, LatencyTracker, ReadCounts, ReadPolicy, Timing, get_read_policy
from .retry import retrying

__all__ = ["DeadlineExceeded", "call", "fetch", "fetch_many", "read_counts", "reset"]

_THREADS = 32  # the pool that runs the requests of file systems without an event loop
_RECHECK_S = 0.05  # a hedge the budget refused is asked for again this often


class DeadlineExceeded(TimeoutError):
    """A remote request got no answer within its deadline (transient: retried)."""


class _Process:
    """This process's latencies, hedge budget, counters and pool (started afresh after a fork,
    with the parent's latencies kept: they describe the same stores)."""

    def __init__(self) -> None:
        self.tracker = LatencyTracker()
        self.counts = ReadCounts()
        self._budget: tuple[ReadPolicy, HedgeBudget] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self.lock = threading.Lock()

    def _forked(self) -> None:
        if self._pid != os.getpid():
            self._pid, self._pool, self._budget = os.getpid(), None, None
            self.counts = ReadCounts()
            self.lock = threading.Lock()

    def budget(self, policy: ReadPolicy) -> HedgeBudget:
        self._forked()
        found = self._budget
        if found is None or found[0] is not policy:
            found = self._budget = (
                policy,
                HedgeBudget(policy.hedge_share, policy.hedge_burst, policy.hedges_in_flight),
            )
        return found[1]

    def pool(self) -> ThreadPoolExecutor:
        self._forked()
        with self.lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="torch-tfrecord-request")
            return self._pool

    def note(self, field: str) -> None:
        self._forked()
        with self.lock:
            setattr(self.counts, field, getattr(self.counts, field) + 1)


_PROCESS = _Process()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_PROCESS.tracker.forked)


def read_counts() -> ReadCounts:
    """This process's hedges sent, hedges won and deadline misses so far (a copy)."""
    _PROCESS._forked()
    with _PROCESS.lock:
        return dataclasses.replace(_PROCESS.counts)


def reset() -> None:
    """Forgets this process's latencies, counters and hedge budget (tests, benchmarks)."""
    _PROCESS.tracker.clear()
    _PROCESS._budget = None
    with _PROCESS.lock:
        _PROCESS.counts = ReadCounts()


def _store(fs: Any, url: str) -> str:
    """The latencies' key of a URL: its scheme and host (or bucket), and the file system's
    options (another endpoint is another store)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]} {getattr(fs, '_fs_token', '')}"


class _Try:
    """One copy of a request, sent: its answer to come, and when it started running (None while
    it waits for the event loop or a thread, or for the file system's session to be made: that
    wait is no measure of the store, and is bounded by the ceiling alone)."""

    __slots__ = ("ended", "future", "hedge", "sent", "started")

    def __init__(self, hedge: bool) -> None:
        self.hedge = hedge
        self.sent = time.monotonic()
        self.started: float | None = None
        self.ended = float("inf")
        self.future: Future[Any] = Future()

    def watch(self, future: Future[Any]) -> _Try:
        """Takes ``future`` as this copy's answer, noting when it comes (of two answers found
        at once, the earlier one wins)."""
        self.future = future
        future.add_done_callback(self._ended)
        return self

    def _ended(self, _: Future[Any]) -> None:
        self.ended = time.monotonic()


def _sender(fs: Any, method: str, *args: Any, **kwargs: Any) -> Callable[[bool], _Try]:
    """A function that sends the request ``fs.method(*args, **kwargs)`` once more, in the
    background: on the file system's loop when it is async, else on the pool."""
    if getattr(fs, "async_impl", False) and hasattr(fs, "_" + method):
        coroutine = getattr(fs, "_" + method)
        sessions = [getattr(fs, name, None) for name in ("set_session", "_set_session")]
        session = next((s for s in sessions if asyncio.iscoroutinefunction(s)), None)

        async def run(attempt: _Try) -> Any:
            if session is not None:
                await session()  # (made once per file system: s3fs, gcsfs, HTTP)
            attempt.started = time.monotonic()
            return await coroutine(*args, **kwargs)

        def send_async(hedge: bool) -> _Try:
            attempt = _Try(hedge)
            return attempt.watch(asyncio.run_coroutine_threadsafe(run(attempt), fs.loop))

        return send_async
    function = getattr(fs, method)

    def call_in_thread(attempt: _Try) -> Any:
        attempt.started = time.monotonic()
        return function(*args, **kwargs)

    def send_sync(hedge: bool) -> _Try:
        attempt = _Try(hedge)
        return attempt.watch(_PROCESS.pool().submit(call_in_thread, attempt))

    return send_sync


@dataclasses.dataclass
class _Read:
    send: Callable[[bool], _Try]
    size: int | None
    timing: Timing
    tries: list[_Try]
    ceiling: float  # the most a copy may wait to start running (seconds from its sending)
    answered: threading.Event
    hedged: bool = False
    next_hedge: float = 0.0
    outcome: Any = None
    done: bool = False

    def send_copy(self, hedge: bool) -> _Try:
        """Sends the request (again), the answer to set ``answered``."""
        copy = self.send(hedge)
        self.tries.append(copy)
        copy.future.add_done_callback(lambda _: self.answered.set())
        return copy

    def elapsed(self, now: float) -> float:
        """Seconds since the first copy started running (0 while it waits to)."""
        started = self.tries[0].started
        return 0.0 if started is None else now - started


def _run(
    store: str,
    requests: Sequence[tuple[Callable[[bool], _Try], int | None]],
    attempt: int,
    on_send: Callable[[], None] | None,
) -> list[Any]:
    """Runs the requests at once, each hedged and under its deadline: each one's answer, or the
    exception it ended with (:class:`DeadlineExceeded` past its deadline)."""
    policy = get_read_policy()
    budget = _PROCESS.budget(policy)
    answered = threading.Event()  # set by every copy's answer (or failure) as it comes
    reads = []
    for send, size in requests:
        timing = policy.timing(_PROCESS.tracker, store, size, attempt)
        budget.requested()
        reads.append(_Read(send, size, timing, [], max(policy.ceiling, timing.deadline), answered))
        reads[-1].send_copy(hedge=False)
        if on_send is not None:
            on_send()
    while True:
        answered.clear()  # (before looking: an answer that comes meanwhile sets it again)
        now = time.monotonic()
        wake = float("inf")
        for read in reads:
            if not read.done:  # (the latencies measured meanwhile move its hedge point and deadline)
                read.timing = policy.timing(_PROCESS.tracker, store, read.size, attempt)
                _settle(read, now, store, budget, on_send)
            if read.done:
                continue
            first = read.tries[0]
            if first.started is None:  # (looked at again soon: it starts any moment)
                wake = min(wake, now + _RECHECK_S, first.sent + read.ceiling)
                continue
            hedge = read.timing.hedge_at
            if hedge is not None and not read.hedged:
                wake = min(wake, max(first.started + hedge, read.next_hedge))
            wake = min(wake, first.started + read.timing.deadline)
        if all(read.done for read in reads):
            return [read.outcome for read in reads]
        answered.wait(max(0.0, wake - time.monotonic()))


def _settle(
    read: _Read,
    now: float,
    store: str,
    budget: HedgeBudget,
    on_send: Callable[[], None] | None,
) -> None:
    """Moves one read on: its first answer, else its hedge or its deadline, when due."""
    errors = []
    for attempt in sorted(read.tries, key=lambda t: t.ended):  # (the first answer wins)
        if not attempt.future.done():
            continue
        error = attempt.future.exception()
        if error is None:
            read.outcome, read.done = attempt.future.result(), True
            _PROCESS.tracker.add(
                store, read.size, min(now, attempt.ended) - (attempt.started or attempt.sent)
            )
            if attempt.hedge:
                _PROCESS.note("hedges_won")
                count(HEDGES_WON, 1)
            break
        errors.append(error)
    if not read.done and errors and len(errors) == len(read.tries):
        read.outcome, read.done = errors[0], True  # (every copy sent failed: retried as a whole)
    if read.done:
        for attempt in read.tries:
            attempt.future.cancel()  # the loser: its answer, if it comes, reaches nobody
        return
    elapsed = read.elapsed(now)
    if elapsed >= read.timing.deadline or now - read.tries[0].sent >= read.ceiling:
        for attempt in read.tries:
            attempt.future.cancel()
        _PROCESS.note("deadline_retries")
        count(DEADLINE_RETRIES, 1)
        read.outcome = DeadlineExceeded(f"no answer within its deadline of {read.timing.deadline:.2f} s")
        read.done = True
        return
    hedge_at = read.timing.hedge_at
    if hedge_at is None or read.hedged or elapsed < hedge_at or now < read.next_hedge:
        return
    if not budget.try_hedge():
        read.next_hedge = now + _RECHECK_S
        return
    read.hedged = True
    try:
        copy = read.send_copy(hedge=True)
    except BaseException:
        budget.hedge_done()
        raise
    copy.future.add_done_callback(lambda _: budget.hedge_done())
    _PROCESS.note("hedges_sent")
    count(HEDGES_SENT, 1)
    if on_send is not None:
        on_send()


def call(
    fs: Any,
    url: str,
    what: str,
    method: str,
    *args: Any,
    size: int | None = None,
    on_send: Callable[[], None] | None = None,
    **kwargs: Any,
) -> Any:
    """``fs.method(*args, **kwargs)`` for ``url`` hedged, under a deadline, retried (see
    :func:`.retry.retrying` for what it raises); ``size``: the bytes it brings, if known."""
    store = _store(fs, url)
    send = _sender(fs, method, *args, **kwargs)
    attempt = 0

    def once() -> Any:
        nonlocal attempt
        attempt += 1
        (outcome,) = _run(store, [(send, size)], attempt, on_send)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return retrying(once, url, what)


def fetch(
    fs: Any,
    url: str,
    path: str,
    start: int | None,
    end: int | None,
    what: str,
    on_send: Callable[[], None] | None = None,
) -> bytes:
    """The bytes ``[start, end)`` of ``path`` (``None``: from the start, to the end)."""
    size = None if end is None else end - (start or 0)
    data = call(fs, url, what, "cat_file", path, start=start, end=end, size=size, on_send=on_send)
    return data  # type: ignore[no-any-return]


def fetch_many(
    fs: Any,
    url: str,
    path: str,
    spans: Sequence[tuple[int, int]],
    what: str,
    on_send: Callable[[], None] | None = None,
) -> list[bytes]:
    """The bytes of each ``(start, end)`` span of ``path``, the requests sent at once, each
    hedged and under its deadline; those that failed are retried together."""
    store = _store(fs, url)
    results: list[bytes | None] = [None] * len(spans)
    missing = list(range(len(spans)))
    senders = [_sender(fs, "cat_file", path, start=start, end=end) for start, end in spans]
    attempt = 0

    def once() -> None:
        nonlocal attempt, missing
        attempt += 1
        requests = [(senders[i], spans[i][1] - spans[i][0]) for i in missing]
        outcomes = _run(store, requests, attempt, on_send)
        failed = [(i, o) for i, o in zip(missing, outcomes, strict=True) if isinstance(o, BaseException)]
        for i, outcome in zip(missing, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                results[i] = outcome
        missing = [i for i, _ in failed]
        if failed:  # retried for only the spans that failed
            raise failed[0][1]

    retrying(once, url, what)
    return results  # type: ignore[return-value]
