"""Pure weighted mixing: how many samples each source gives an epoch, and which source each place takes.

An epoch of a mix has ``total`` places. Source ``i`` gets ``counts[i]`` of them (its weight's
share, rounded so the counts add up: each within one of ``weight * total``). Its ``k``-th item
sits at the fraction ``(2k + 1) / (2 * counts[i])`` of the epoch, and the places are the items
of all sources in the order of these fractions (ties: the lower source first). So every stretch
of the epoch holds each source in about its proportion, each source's items come in its own
order, and the source and item of any place are found without listing the epoch (a binary
search per source, exact in integers): O(1) memory whatever the size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

__all__ = ["MixSchedule", "locate", "quotas"]

Int64Array = npt.NDArray[np.int64]


def quotas(weights: Sequence[float], total: int) -> tuple[int, ...]:
    """Each source's share of ``total`` places, within one of ``weight / sum(weights) * total``.

    Largest remainders (exact fractions; ties to the lower index), so it is a pure function.

    Raises:
        ValueError: a negative or non-finite weight, or all weights zero.
    """
    exact = [Fraction(w) for w in weights]  # Fraction() refuses nan and inf
    if any(w < 0 for w in exact) or sum(exact) <= 0:
        raise ValueError(f"weights {list(weights)} must be >= 0 and not all 0")
    shares = [w * total / sum(exact) for w in exact]
    counts = [int(share) for share in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(shares[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return tuple(counts)


def _places(source: int, items: Int64Array, counts: Sequence[int]) -> Int64Array:
    """The places in the epoch of items ``items`` of ``source``."""
    own = counts[source]
    places = items.copy()
    for other, count in enumerate(counts):
        if other == source or count == 0:
            continue
        # Items k' of `other` before item k of `source`: (2k' + 1) * own < (2k + 1) * count, or
        # <= for a lower source (ties go to it first).
        excess = (2 * items + 1) * count - own
        before = excess // (2 * own) + 1 if other < source else -(-excess // (2 * own))
        places += np.clip(before, 0, count)
    return places


def locate(places: npt.ArrayLike, counts: Sequence[int]) -> tuple[Int64Array, Int64Array]:
    """The source and the item of that source at each place of an epoch (vectorised).

    Args:
        places: ints in ``[0, sum(counts))``.
        counts: items of each source in the epoch (:func:`quotas`).

    Returns:
        ``(sources, items)``: int64 arrays shaped like ``places``.
    """
    target = np.asarray(places, dtype=np.int64)
    total = sum(counts)
    if target.size and (target.min() < 0 or target.max() >= total):
        raise ValueError(f"places must lie in [0, {total})")
    sources = np.full(target.shape, -1, dtype=np.int64)
    items = np.zeros(target.shape, dtype=np.int64)
    for source, count in enumerate(counts):
        if count == 0:
            continue
        low = np.zeros(target.shape, dtype=np.int64)
        high = np.full(target.shape, count, dtype=np.int64)
        while True:  # the first item whose place is >= target
            open_ = low < high
            if not open_.any():
                break
            middle = (low + high) // 2
            before = _places(source, middle, counts) < target
            low = np.where(open_ & before, middle + 1, low)
            high = np.where(open_ & ~before, middle, high)
        inside = low < count
        found = inside & (_places(source, np.where(inside, low, 0), counts) == target)
        sources[found] = source
        items[found] = low[found]
    return sources, items


@dataclasses.dataclass(frozen=True)
class MixSchedule:
    """Which stretch of each source's stream every epoch of a mix takes.

    From epoch ``origin`` on, each epoch takes ``counts[i]`` items of source ``i``, the epoch
    ``origin`` starting at stream position ``offsets[i]``: so each source goes on through its
    passes from epoch to epoch, whatever the other sources do. A resume with new weights
    starts a new schedule where the old one stopped.
    """

    counts: tuple[int, ...]
    offsets: tuple[int, ...]
    origin: int = 0

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.offsets) or min(self.counts, default=0) < 0:
            raise ValueError(f"counts {self.counts} and offsets {self.offsets} do not fit")

    @property
    def epoch_size(self) -> int:
        return sum(self.counts)

    def offsets_at(self, epoch: int) -> tuple[int, ...]:
        """Each source's first stream position in ``epoch``."""
        if epoch < self.origin:
            raise ValueError(
                f"epoch {epoch} is before epoch {self.origin}, where this mix's schedule starts "
                "(its weights or epoch size changed at a resume)"
            )
        return tuple(o + (epoch - self.origin) * c for o, c in zip(self.offsets, self.counts, strict=True))
