"""Which records, in which order, for each (epoch, rank, worker): the epoch plan, the permutation
behind every shuffle, mixing schedules, the cache's read schedule and saved places (resume)."""
