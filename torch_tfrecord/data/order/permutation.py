"""The pseudo-random permutation behind every shuffle: a keyed Feistel network with cycle
walking, a function of ``(seed, epoch, n, position)`` computed for the positions asked only.

The network runs in the compiled extension when it is built (the same values, bit for bit),
otherwise in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ...support.extension import compiled as _native
from ...support.seeds import mix_seed

__all__ = ["permute", "permute_windows"]

Int64Array = npt.NDArray[np.int64]

_ROUNDS = 4


def _mix_array(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # splitmix64's finaliser, vectorised; uint64 arithmetic wraps, which is what we want.
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _feistel(
    values: npt.NDArray[np.uint64], half_bits: int, keys: Sequence[int | npt.NDArray[np.uint64]]
) -> npt.NDArray[np.uint64]:
    """A balanced Feistel network: a bijection of ``[0, 4**half_bits)`` for each key (a key
    may be an array: one key per value)."""
    shift = np.uint64(half_bits)
    mask = np.uint64((1 << half_bits) - 1)
    left = values >> shift
    right = values & mask
    for key in keys:
        left, right = right, left ^ (_mix_array(right ^ np.asarray(key, dtype=np.uint64)) & mask)
    return (left << shift) | right


def _walk(
    values: npt.NDArray[np.uint64],
    half_bits: int,
    keys: Sequence[int],
    limit: int,
    windows: npt.NDArray[np.uint64] | None = None,
    native: bool = True,
) -> npt.NDArray[np.uint64]:
    """The Feistel network applied to ``values`` until each lies below ``limit`` (cycle walking:
    each step lands inside with probability > 1/4, the limit being over a quarter of the range).

    ``windows``: one window per value, whose own keys are ``mix(window ^ key)`` (block shuffle).
    ``native=False`` runs the numpy version even when the extension is built (tests compare).
    """
    if native and _native is not None and half_bits <= 31:
        values = np.ascontiguousarray(values, dtype=np.uint64).copy()
        _native.feistel(
            values.view(np.int64),
            half_bits,
            np.asarray(keys, dtype=np.uint64).view(np.int64),
            limit,
            None if windows is None else np.ascontiguousarray(windows, dtype=np.uint64).view(np.int64),
        )
        return values
    own: list[int | npt.NDArray[np.uint64]] = list(keys)
    if windows is not None:
        own = [_mix_array(windows ^ np.uint64(key)) for key in keys]
    values = _feistel(values, half_bits, own)
    bound = np.uint64(limit)
    outside = np.flatnonzero(values >= bound)
    while outside.size:
        step = [key if isinstance(key, int) else key[outside] for key in own]
        walked = _feistel(values[outside], half_bits, step)
        values[outside] = walked
        outside = outside[walked >= bound]
    return values


def permute_windows(positions: Int64Array, n: int, window: int, seed: int, epoch: int) -> Int64Array:
    """Where a block shuffle sends each position: a permutation of each window
    ``[w * window, (w + 1) * window) ∩ [0, n)``, keyed by (seed, epoch, w)."""
    windows = positions // window
    within = (positions - windows * window).astype(np.uint64)
    result = np.empty_like(positions)
    last = (n - 1) // window
    partial = n - last * window  # size of the last window
    full = windows < last if partial < window else np.ones(len(positions), dtype=bool)
    if full.any() and window > 1:
        half_bits = max(1, ((window - 1).bit_length() + 1) // 2)
        keys = [mix_seed(seed, epoch, round_) for round_ in range(_ROUNDS)]
        values = _walk(within[full], half_bits, keys, window, windows[full].astype(np.uint64))
        result[full] = windows[full] * window + values.astype(np.int64)
    elif full.any():
        result[full] = positions[full]
    if not full.all():
        rest = ~full
        result[rest] = last * window + permute(
            within[rest].astype(np.int64), partial, mix_seed(seed, epoch), last
        )
    return result


def permute(positions: npt.ArrayLike, n: int, seed: int, epoch: int = 0) -> Int64Array:
    """Where a pseudo-random permutation of ``range(n)`` sends each position.

    A keyed Feistel network over the smallest power of four >= n, with cycle walking back into
    ``[0, n)``: a true permutation, computed for the given positions only (no table of n ints).

    Args:
        positions: ints in ``[0, n)``.
        n: size of the permuted range.
        seed, epoch: the key; every (seed, epoch) gives another permutation.

    Returns:
        int64 array, ``permutation[positions]``.
    """
    array = np.asarray(positions, dtype=np.int64)
    if n <= 1 or array.size == 0:
        return array.copy()
    if array.min() < 0 or array.max() >= n:
        raise ValueError(f"positions must lie in [0, {n})")
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [mix_seed(seed, epoch, round_) for round_ in range(_ROUNDS)]
    return _walk(array.astype(np.uint64), half_bits, keys, n).astype(np.int64)
