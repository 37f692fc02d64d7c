"""Batches loaded in runs: as many to a task as make the hand-off's cost small beside the work.

Every task handed to a loading thread (or the prefetch thread, or the loading process's threads)
costs wake-ups: the thread is woken for it, the consumer is woken by its result, and the two
take the GIL from each other. On a small machine (a virtual one above all: a wake-up of an idle
core there costs tens of microseconds) that is about what reading and decoding a batch of small
Examples costs, so one task per batch spent as much on the hand-off as on the batch
(benchmarks/bench_loader.py: ``prefetch=2`` at half the speed of no prefetch on 35-byte Examples).

:class:`Pace` measures what a batch takes to load and says how many batches the next task
loads (:func:`runs`): enough for about :data:`RUN_SECONDS` of work, at most :data:`MAX_RUN` batches, one while
nothing is measured yet (the first batch is not kept waiting for a run) and one for batches that
take longer than the run alone (images). :func:`run_of` makes one task of several: their items
in order; an error of one is raised after the items of the tasks before it, and the tasks after
it do not run. Nothing else changes: the same batches in the same order, counted where the loop
receives them (a state never includes a batch made ahead).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["MAX_RUN", "RUN_SECONDS", "Pace", "run_of", "runs"]

RUN_SECONDS = 0.002
"""The work one task aims at: wake-ups cost tens of microseconds, so about 2 ms keeps them small."""
MAX_RUN = 16
"""Batches one task loads at most (the bound on batches made ahead is ``depth`` tasks of these)."""

Task = Callable[[], list[Any]]


class Pace:
    """How many batches the next task loads, from what the batches loaded so far took.

    Example:
        >>> pace = Pace()
        >>> pace.run()  # nothing measured yet
        1
        >>> pace.took(0.0001, batches=1)
        >>> pace.run()
        16
        >>> for _ in range(8):
        ...     pace.took(0.05, batches=1)  # slower batches: shorter runs
        >>> pace.run()
        1
    """

    __slots__ = ("_seconds",)

    def __init__(self) -> None:
        self._seconds: float | None = None  # a batch's time, smoothed (None: not measured yet)

    def took(self, seconds: float, batches: int) -> None:
        """``batches`` batches took ``seconds`` of a loading thread's CPU (its own work: not the
        time it waited for the GIL, which grows with the hand-off this is to keep small)."""
        each = seconds / max(batches, 1)
        known = self._seconds
        self._seconds = each if known is None else 0.75 * known + 0.25 * each

    def run(self) -> int:
        """Batches for the next task: 1 to :data:`MAX_RUN`."""
        each = self._seconds
        if each is None:
            return 1
        return max(1, min(MAX_RUN, int(RUN_SECONDS / each) if each > 0 else MAX_RUN))


def runs(count: int, pace: Pace | None) -> Iterator[range]:
    """The places ``0 .. count - 1`` in runs, each as long as ``pace`` says then (1 with no pace)."""
    at = 0
    while at < count:
        run = range(at, min(count, at + (pace.run() if pace is not None else 1)))
        yield run
        at = run.stop


def run_of(tasks: Sequence[Task], pace: Pace | None) -> Task:
    """One task loading what ``tasks`` load, in order, timed into ``pace`` (none: one task as it is)."""
    if pace is None and len(tasks) == 1:
        return tasks[0]
    assert pace is not None, "a run of several tasks is timed"
    if len(tasks) == 1:
        only = tasks[0]

        def single() -> list[Any]:
            start = time.thread_time()
            items = only()
            pace.took(time.thread_time() - start, 1)
            return items

        return single

    def several() -> list[Any] | _RaisedAfter:
        items: list[Any] = []
        start = time.thread_time()
        for done, task in enumerate(tasks):
            try:
                items += task()
            except BaseException as error:  # the items before it first, then the error
                pace.took(time.thread_time() - start, done + 1)
                if not items:
                    raise
                return _RaisedAfter(items, error)
        pace.took(time.thread_time() - start, len(tasks))
        return items

    return several  # type: ignore[return-value]


class _RaisedAfter:
    """A run's items up to a task that failed: iterating it gives them, then raises the error
    (where the loop iterates a task's items: in its own thread, at the failed batch's place)."""

    __slots__ = ("error", "items")

    def __init__(self, items: list[Any], error: BaseException) -> None:
        self.items = items
        self.error = error

    def __iter__(self) -> Iterator[Any]:
        yield from self.items
        self.items = []
        raise self.error
