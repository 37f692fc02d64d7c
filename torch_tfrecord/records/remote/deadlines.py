"""When a remote read is hedged and when it is given up on: pure bookkeeping, no I/O.

A :class:`LatencyTracker` keeps the latencies of the reads answered in this process, per store
and size class, in bounded windows; :class:`ReadPolicy` turns them into a read's *hedge point*
(the running p95: past it, the same request is sent again) and its *deadline* (``multiplier``
times the running p99, within ``[floor, ceiling]``: past it, the read is cancelled and retried).
A :class:`HedgeBudget` keeps the extra requests to a few percent of all, and a few at once.
:mod:`.hedged` applies them to the requests.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque

__all__ = [
    "HedgeBudget",
    "LatencyTracker",
    "ReadCounts",
    "ReadPolicy",
    "Timing",
    "get_read_policy",
    "set_read_policy",
    "size_class",
]


@dataclasses.dataclass(frozen=True)
class ReadPolicy:
    """Deadlines and hedged requests of remote reads (per process: :func:`set_read_policy`).

    Args:
        floor: the shortest deadline in seconds, whatever the measured latencies.
        ceiling: the longest deadline.
        multiplier: a read's deadline is this times the running p99 of its size class (of its
            store's reads of any size while its class has fewer than ``min_samples``).
        hedge: whether a read still unanswered at the running p95 of its size class is sent
            again (False: never). A class is hedged only once ``min_samples`` of its latencies
            were measured: a guess would duplicate large downloads on a slow machine.
        first_deadline: the deadline of a read before any ``min_samples`` latencies of its store
            were measured: this many seconds, plus its size at ``first_rate`` bytes a second.
        first_rate: see ``first_deadline``.
        min_hedge: the earliest hedge point, whatever the latencies (a store that answers in
            microseconds, ``memory://``, gains nothing from a second request).
        hedge_share: at most this share of requests are hedges (beyond ``hedge_burst``).
        hedge_burst: hedges allowed before any request was made (the budget's reserve).
        hedges_in_flight: the most hedges outstanding at once.
        min_samples: latencies needed before the measured quantiles are used.

    A read that misses its deadline is retried (a transient failure, see :mod:`.retry`) with
    its deadline doubled at each further attempt, so a read that is slow for good still ends.
    """

    floor: float = 1.0
    ceiling: float = 15.0
    multiplier: float = 4.0
    hedge: bool = True
    first_deadline: float = 2.0
    first_rate: float = 1e6
    min_hedge: float = 0.05
    hedge_share: float = 0.03
    hedge_burst: float = 3.0
    hedges_in_flight: int = 4
    min_samples: int = 8

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {self.floor=}, {self.ceiling=}")
        if self.multiplier < 1:
            raise ValueError(f"{self.multiplier=} must be at least 1")
        if self.first_deadline <= 0 or self.first_rate <= 0 or self.min_hedge < 0:
            raise ValueError(
                f"{self.first_deadline=} and {self.first_rate=} must be positive, "
                f"{self.min_hedge=} not negative"
            )
        if not 0 <= self.hedge_share <= 1:
            raise ValueError(f"{self.hedge_share=} must be in [0, 1]")
        if self.hedge_burst < 0 or self.hedges_in_flight < 0:
            raise ValueError(f"{self.hedge_burst=} and {self.hedges_in_flight=} must not be negative")
        if self.min_samples < 1:
            raise ValueError(f"{self.min_samples=} must be at least 1")

    def timing(self, tracker: LatencyTracker, store: str, size: int | None, attempt: int = 1) -> Timing:
        """The hedge point and deadline of a read of ``size`` bytes from ``store`` (the
        ``attempt``-th: each retry after a missed deadline doubles the deadline)."""
        p95, p99 = tracker.quantiles(store, size_class(size), self.min_samples)
        hedge_at = None if p95 is None or not self.hedge else max(self.min_hedge, p95)
        if p99 is None:
            _, p99 = tracker.quantiles(store, -1, self.min_samples)
        if p99 is None:
            deadline = self.first_deadline + (size or 0) / self.first_rate
        else:
            deadline = self.multiplier * p99
        deadline = min(self.ceiling, max(self.floor, deadline) * 2 ** (attempt - 1))
        return Timing(hedge_at if hedge_at is not None and hedge_at < deadline else None, deadline)


@dataclasses.dataclass(frozen=True)
class Timing:
    """One read's hedge point (None: not hedged) and deadline, in seconds from its start."""

    hedge_at: float | None
    deadline: float


def size_class(size: int | None) -> int:
    """The size class of a read of ``size`` bytes: 0 up to 64 KiB (and lookups, ``None``), then
    one class per factor of 4 (256 KiB, 1 MiB, 4 MiB), the last one open-ended."""
    if size is None or size <= 64 << 10:
        return 0
    return min(4, 1 + (max(0, size - 1).bit_length() - 17) // 2)


class LatencyTracker:
    """The latencies of answered reads, per store and size class, each in a window of the last
    ``window``, and of every class of a store together (class -1).

    Thread-safe. A read cut off by its deadline is not counted (it would raise the deadlines of
    every later read, and a miss is retried with a doubled deadline anyway).
    """

    def __init__(self, window: int = 256) -> None:
        self.window = window
        self._samples: dict[tuple[str, int], deque[float]] = {}
        self._sorted: dict[tuple[str, int], list[float]] = {}
        self._lock = threading.Lock()

    def add(self, store: str, size: int | None, seconds: float) -> None:
        with self._lock:
            for key in ((store, size_class(size)), (store, -1)):  # (-1: every class of the store)
                samples = self._samples.setdefault(key, deque(maxlen=self.window))
                samples.append(seconds)
                self._sorted.pop(key, None)

    def quantiles(self, store: str, size_class: int, min_samples: int) -> tuple[float | None, float | None]:
        """The running p95 and p99 of the class (-1: of every class of the store), or Nones
        below ``min_samples`` latencies."""
        key = (store, size_class)
        with self._lock:
            samples = self._samples.get(key)
            if samples is None or len(samples) < min_samples:
                return None, None
            ordered = self._sorted.get(key)
            if ordered is None:
                ordered = self._sorted[key] = sorted(samples)
            return _quantile(ordered, 0.95), _quantile(ordered, 0.99)

    def forked(self) -> None:
        """In a forked child: a new lock (a thread of the parent that held it is not here to let
        go); the latencies are kept."""
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._sorted.clear()


def _quantile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class HedgeBudget:
    """How many hedges may be sent: a token bucket that earns ``share`` of a token per request
    (up to ``burst`` tokens, where it starts), a hedge costing one, and at most ``in_flight``
    hedges outstanding at once. Thread-safe."""

    def __init__(self, share: float, burst: float, in_flight: int) -> None:
        self.share, self.burst, self.in_flight = share, burst, in_flight
        self._tokens = burst
        self._outstanding = 0
        self._lock = threading.Lock()

    def requested(self) -> None:
        """A (first) request was sent: the budget earns its share."""
        with self._lock:
            self._tokens = min(self.burst, self._tokens + self.share)

    def try_hedge(self) -> bool:
        """Takes a hedge's token and place if there are both (call :meth:`hedge_done` later)."""
        with self._lock:
            if self._tokens < 1 or self._outstanding >= self.in_flight:
                return False
            self._tokens -= 1
            self._outstanding += 1
            return True

    def hedge_done(self) -> None:
        with self._lock:
            self._outstanding -= 1


@dataclasses.dataclass
class ReadCounts:
    """This process's remote reads: hedges sent, hedges that answered first, deadline misses."""

    hedges_sent: int = 0
    hedges_won: int = 0
    deadline_retries: int = 0


_policy = ReadPolicy()


def set_read_policy(policy: ReadPolicy) -> ReadPolicy:
    """Sets the deadlines and hedging of remote reads in this process (DataLoader workers forked
    after it inherit it); returns the previous policy. ``ReadPolicy(hedge=False)``: no hedges."""
    global _policy
    previous, _policy = _policy, policy
    return previous


def get_read_policy() -> ReadPolicy:
    """The policy set by :func:`set_read_policy`."""
    return _policy
