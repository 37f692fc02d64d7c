"""TFDS split strings (``"train[:10%]+test"``) as record ranges of shards; pure, no I/O.

The grammar and rounding are TFDS's: ``name``, ``name[from:to]`` with ``from`` / ``to`` as
record numbers (negative counts from the end), percents (``10%``, rounded to the closest record)
or shards (``2shard``), ``name[kshard]`` for one shard, ``all`` for every split, and ``+`` to
concatenate.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from ...errors import SpecError

__all__ = ["ShardRange", "SplitSlice", "parse_split", "shard_ranges"]

_PART = re.compile(r"^(?P<split>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_BOUND = re.compile(r"^((?P<value>-?[\d_.]+)(?P<unit>%|shard)?)?$")


class SplitError(SpecError):
    """A split string that does not parse or does not fit the split."""


@dataclasses.dataclass(frozen=True)
class SplitSlice:
    """Records ``[start, stop)`` of split ``split`` (record numbers through its shards)."""

    split: str
    start: int
    stop: int


@dataclasses.dataclass(frozen=True)
class ShardRange:
    """Records ``[start, stop)`` of shard ``shard`` of split ``split``."""

    split: str
    shard: int
    start: int
    stop: int


def _number(text: str, unit: str, spec: str) -> float | int:
    try:
        return float(text) if unit == "%" else int(text)
    except ValueError:
        raise SplitError(f"split {spec!r}: {text!r} is not a number") from None


def _absolute(value: float | int | None, unit: str, lengths: Sequence[int], default: int) -> int:
    total = sum(lengths)
    if value is None:
        return default
    if unit == "%":
        return round(value * total / 100.0)  # TFDS's "closest" rounding (round half to even)
    if unit == "shard":
        shards = int(value)
        if shards < 0:
            shards += len(lengths)
        return sum(lengths[:shards])
    return int(value)


def _one(part: str, spec: str, splits: Mapping[str, Sequence[int]]) -> list[SplitSlice]:
    match = _PART.match(part)
    if not match:
        raise SplitError(
            f"split {spec!r}: cannot read {part!r}; write e.g. 'train', 'train[:10%]', 'train[100:200]' "
            "or 'train+test'"
        )
    name, selector = match["split"], match["selector"]
    if name == "all":
        if selector:
            raise SplitError(f"split {spec!r}: 'all' takes no slice")
        return [SplitSlice(split, 0, sum(lengths)) for split, lengths in splits.items()]
    if name not in splits:
        raise SplitError(f"split {spec!r}: no split {name!r}; there are {sorted(splits)}")
    lengths = splits[name]
    total = sum(lengths)
    if selector is None:
        return [SplitSlice(name, 0, total)]
    bounds = [_BOUND.match(text) for text in selector.split(":")]
    if not all(bounds) or len(bounds) > 2 or not any(b[0] for b in bounds if b):
        raise SplitError(f"split {spec!r}: cannot read the slice [{selector}]")
    if len(bounds) == 1:
        (only,) = bounds
        assert only is not None
        if only["unit"] != "shard":
            raise SplitError(f"split {spec!r}: records and percents take a slice ('train[:10]')")
        first = int(only["value"])
        start_value: float | int | None = first
        stop_value: float | int | None = first + 1
        unit = "shard"
    else:
        low, high = bounds
        assert low is not None and high is not None
        unit = low["unit"] or high["unit"] or "abs"
        if low["unit"] and high["unit"] and low["unit"] != high["unit"]:
            raise SplitError(f"split {spec!r}: both ends of a slice take the same unit")
        start_value = _number(low["value"], unit, spec) if low["value"] else None
        stop_value = _number(high["value"], unit, spec) if high["value"] else None
    start = _absolute(start_value, unit, lengths, 0)
    stop = _absolute(stop_value, unit, lengths, total)
    if abs(start) > total or abs(stop) > total:
        raise SplitError(f"split {spec!r}: the slice [{selector}] does not fit {name!r} ({total} records)")
    start = start + total if start < 0 else start
    stop = stop + total if stop < 0 else stop
    return [SplitSlice(name, start, max(start, stop))]


def parse_split(spec: str, splits: Mapping[str, Sequence[int]]) -> list[SplitSlice]:
    """The record ranges a TFDS split string selects.

    Args:
        spec: e.g. ``"train"``, ``"train[:10%]"``, ``"train[100:200]"``, ``"train[-5:]"``,
            ``"train[1shard:3shard]"``, ``"train+test"``, ``"all"``.
        splits: split name -> records per shard (``shardLengths``).

    Raises:
        SplitError: the string does not parse, names no split, or the slice does not fit.

    Example:
        >>> parse_split("train[:10%]+test", {"train": [50, 50], "test": [10]})
        [SplitSlice(split='train', start=0, stop=10), SplitSlice(split='test', start=0, stop=10)]
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SplitError(f"split must be a non-empty string, got {spec!r}")
    parts = re.split(r"\s*\+\s*", spec.strip())
    return [item for part in parts for item in _one(part, spec, splits)]


def shard_ranges(slices: Sequence[SplitSlice], splits: Mapping[str, Sequence[int]]) -> list[ShardRange]:
    """Each slice cut at its split's shard boundaries: the records to read, shard by shard, in order.

    Shards a slice does not touch are left out.

    Example:
        >>> ranges = shard_ranges([SplitSlice("train", 5, 15)], {"train": [10, 10]})
        >>> [(r.shard, r.start, r.stop) for r in ranges]
        [(0, 5, 10), (1, 0, 5)]
    """
    ranges = []
    for piece in slices:
        first = 0
        for shard, length in enumerate(splits[piece.split]):
            start, stop = max(piece.start - first, 0), min(piece.stop - first, length)
            if start < stop:
                ranges.append(ShardRange(piece.split, shard, start, stop))
            first += length
    return ranges
