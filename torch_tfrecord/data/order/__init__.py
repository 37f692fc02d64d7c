"""Which records, in which order, for each (epoch, rank, worker): the epoch plan (:mod:`.plan`,
whose names this package hands on as ``tt.order``), the permutation behind every shuffle, mixing
schedules, the cache's read schedule and saved places (resume)."""

from . import plan
from .plan import *  # noqa: F403  (tt.order: the epoch plan's names)

__all__ = plan.__all__
