"""Batches loaded in runs: as many to a task as make the hand-off's cost small beside the work.

Every task handed to a loading thread (or the prefetch thread, or the loading process's threads)
costs wake-ups: the thread is woken for it, the consumer is woken by its result, and the two
take the GIL from each other. On a small machine (a virtual one above all: a wake-up of an idle
core there costs tens of microseconds) that is about what reading and decoding a batch of small
Examples costs, so one task per batch spent as much on the hand-off as on the batch
(benchmarks/bench_loader.py: ``prefetch=2`` at half the speed of no prefetch on 35-byte Examples).

:class:`Pace` measures what a batch takes to load and says how many batches the next task
loads (:func:`runs`): enough for about :data:`RUN_SECONDS` of work, at most :data:`MAX_RUN`
batches; one while nothing is measured yet (the first batch is not kept waiting for a run), and
one for batches slower than the run alone (images: see :class:`Pace`'s two clocks).
:func:`run_of` makes one task of several: their items in order; an error of one is raised after
the items of the tasks before it, the tasks after it do not run, and the loader loads no further
(:func:`ends`). Nothing else changes: the same batches in the same order, counted where the loop
receives them (a state never includes a batch made ahead).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["MAX_RUN", "RUN_SECONDS", "Pace", "RaisedAfter", "Task", "ends", "run_of", "runs"]

logger = logging.getLogger(__name__)

RUN_SECONDS = 0.002
"""The work one task aims at: wake-ups cost tens of microseconds, so about 2 ms keeps them small."""
MAX_RUN = 16
"""Batches one task loads at most (the bound on batches made ahead is ``depth`` tasks of these)."""

Task = Callable[[], list[Any]]


class Pace:
    """How many batches the next task loads, from what the batches loaded so far took.

    Two clocks: the loading thread's own CPU, which sets the run (not the time it waited for
    the GIL, which grows with the very hand-off runs are to keep small), and wall time, which
    caps it (a batch whose work is elsewhere, on the image codec's threads or waiting on a
    remote read, costs the thread little CPU but is slow: it goes alone).

    Example:
        >>> pace = Pace()
        >>> pace.run()  # nothing measured yet
        1
        >>> pace.took(0.0001, 0.0002, batches=1)
        >>> pace.run()
        16
        >>> for _ in range(8):
        ...     pace.took(0.0001, 0.05, batches=1)  # little CPU here, but slow: alone
        >>> pace.run()
        1
    """

    __slots__ = ("_cpu", "_wall")

    def __init__(self) -> None:
        self._cpu: float | None = None  # a batch's CPU seconds, smoothed (None: not measured yet)
        self._wall = 0.0  # its wall seconds, smoothed

    def took(self, cpu: float, wall: float, batches: int) -> None:
        """``batches`` batches took ``cpu`` seconds of a loading thread's CPU and ``wall`` seconds
        (called from any loading thread: an update lost to a race only slows the average)."""
        count = max(batches, 1)
        known = self._cpu
        if known is None:
            self._cpu, self._wall = cpu / count, wall / count
        else:
            self._cpu = 0.75 * known + 0.25 * cpu / count
            self._wall = 0.75 * self._wall + 0.25 * wall / count

    def run(self) -> int:
        """Batches for the next task: 1 to :data:`MAX_RUN`."""
        cpu, wall = self._cpu, self._wall
        if cpu is None:
            return 1
        by_cpu = RUN_SECONDS / cpu if cpu > 0 else MAX_RUN
        by_wall = _WALL_RUNS * RUN_SECONDS / wall if wall > 0 else MAX_RUN
        return max(1, min(MAX_RUN, int(min(by_cpu, by_wall))))


_WALL_RUNS = 10  # a run's wall time at most this many RUN_SECONDS (GIL waits included)


def runs(count: int, pace: Pace | None) -> Iterator[range]:
    """The places ``0 .. count - 1`` in runs, each as long as ``pace`` says then (1 with no pace)."""
    at = 0
    while at < count:
        run = range(at, min(count, at + (pace.run() if pace is not None else 1)))
        yield run
        at = run.stop


def run_of(
    tasks: Sequence[Task],
    pace: Pace | None,
    together: Callable[[], list[Any] | None] | None = None,
    finish: Callable[[Any], Any] | None = None,
) -> Task:
    """One task loading what ``tasks`` load, in order, timed into ``pace`` (none: one task as it is).

    ``together``, where given, loads the same items at once (one read and decode for the run) but
    for ``finish``, which then runs on each; where it gives None or fails, the tasks run one by
    one, which raise (or skip) each error at its own item."""
    if pace is None:
        if len(tasks) != 1:
            raise ValueError("a run of several tasks is timed: give a pace")
        return tasks[0]

    def loads() -> list[Any] | RaisedAfter:
        items: list[Any] = []
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            whole = together() if together is not None else None
        except Exception as error:  # the tasks one by one raise it at its place (or load them)
            logger.warning("a run of %d batches not loaded at once (%r): batch by batch", len(tasks), error)
            whole = None
        steps = tasks if whole is None else [functools.partial(_finished, item, finish) for item in whole]
        for done, step in enumerate(steps):
            try:
                items += step()
            except BaseException as error:  # the items before it first, then the error
                pace.took(time.thread_time() - cpu, time.perf_counter() - wall, done + 1)
                if not items:
                    raise
                return RaisedAfter(items, error)
        pace.took(time.thread_time() - cpu, time.perf_counter() - wall, len(steps))
        return items

    return loads  # type: ignore[return-value]


def _finished(item: Any, finish: Callable[[Any], Any] | None) -> list[Any]:
    return [item if finish is None else finish(item)]


class RaisedAfter:
    """A run's items up to a task that failed: iterating it gives them, then raises the error
    (where the loop iterates a task's items: in its own thread, at the failed batch's place).
    Nothing after it is needed: a loader that gets one loads no further (see :func:`ends`)."""

    __slots__ = ("error", "items")

    def __init__(self, items: list[Any], error: BaseException) -> None:
        self.items = items
        self.error = error

    def __iter__(self) -> Iterator[Any]:
        yield from self.items
        self.items = []
        raise self.error


def ends(loaded: object) -> bool:
    """Whether ``loaded`` (what a task returned) is the last a loader needs to make: a run that
    failed part-way (its error is raised where the loop reaches it)."""
    return isinstance(loaded, RaisedAfter)
