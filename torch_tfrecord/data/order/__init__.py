"""Which records, in which order, for each (epoch, rank, worker): the epoch plan (:mod:`.plan`,
whose names this package hands on as ``tt.order``), the permutation behind every shuffle, mixing
schedules, the cache's read schedule and saved places (resume)."""

from .plan import (
    EpochPlan,
    Progress,
    Ranges,
    Shuffle,
    WorkerSlice,
    block_size,
    check_ranges,
    merge_progress,
    rest_of_epoch,
)

__all__ = [
    "EpochPlan",
    "Progress",
    "Ranges",
    "Shuffle",
    "WorkerSlice",
    "block_size",
    "check_ranges",
    "merge_progress",
    "rest_of_epoch",
]
