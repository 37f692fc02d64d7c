"""Which cached shards to evict, and whether to cache one at all: pure decisions over the
readers' schedules (when each process needs which shards), made by
:class:`~torch_tfrecord.records.remote.cache.ShardCache` under its lock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["FETCH_AHEAD", "ShardUses", "choose_victims", "next_use"]

ShardUses = Mapping[str, Sequence[tuple[float, float]]]
"""Per cache key, the times ``(first, last)`` of each use; a time is ``epoch + fraction of it``."""

# Readers fetch the shards they need within this much of an epoch ahead of their place.
FETCH_AHEAD = 0.05


def next_use(
    key: str, schedules: Sequence[ShardUses], now: float, *, after_current: bool = False, ahead: float = 0.0
) -> float:
    """When ``key`` is needed next after ``now`` by any of the ``schedules``: ``now`` while a use
    is under way, infinity when none will.

    The readers' uses are taken together as visits: uses that overlap or follow each other
    within ``ahead`` are one. ``after_current``: the start of the visit after the one under way,
    or about to start (within ``ahead``): what caching a shard fetched for that visit gains
    (the visit reads its bytes either way).
    """
    visits: list[list[float]] = []
    for first, last in sorted(span for schedule in schedules for span in schedule.get(key, ())):
        if visits and first <= visits[-1][1] + ahead:
            visits[-1][1] = max(visits[-1][1], last)
        else:
            visits.append([first, last])
    upcoming = [visit for visit in visits if visit[1] >= now]
    if not upcoming:
        return math.inf
    if after_current and upcoming[0][0] <= now + ahead:
        return upcoming[1][0] if len(upcoming) > 1 else math.inf
    return max(upcoming[0][0], now)


def choose_victims(
    candidates: Sequence[tuple[str, int, float, float]], needed: int, incoming_use: float
) -> list[str] | None:
    """The entries to evict to free ``needed`` bytes, or None when it is better not to cache.

    ``candidates`` are ``(key, size, next use, last access)``. Those needed latest go first
    (never used again before those needed sooner; least recently used among equals), and only
    those needed later than the incoming shard, which is needed at ``incoming_use``: a shard
    read once never pushes out one that will be read sooner (scan resistance; Belady's rule
    with the option not to cache).
    """
    if needed <= 0:
        return []
    freed, victims = 0, []
    for key, size, use, _ in sorted(candidates, key=lambda c: (-c[2], c[3])):
        if not use > incoming_use:
            break
        victims.append(key)
        freed += size
        if freed >= needed:
            return victims
    return None
