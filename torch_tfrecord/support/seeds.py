"""Seeds mixed from integers (splitmix64): the one rule for every seed the library derives.

Pure and stable across versions: saved states, augmentations and image crops depend on it.
"""

from __future__ import annotations

__all__ = ["mix_seed"]

_M64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A well-mixed 63-bit seed from integers (e.g. ``seed, epoch, record_id``); pure and stable."""
    state = 0x243F6A8885A308D3
    for value in values:
        state = _splitmix(state ^ (int(value) & _M64))
    return state >> 1
