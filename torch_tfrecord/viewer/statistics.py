"""Per-feature statistics of records, gathered one record at a time so that a report can be made
at any point (the page shows it as partial until every record is in): how often each feature is
present, its lengths, a histogram of its numbers, its most frequent values.

Pure: described records in (:func:`torch_tfrecord.codec.inspect.describe_record`), JSON out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .record_view import image_type, json_value

__all__ = ["FeatureStatistics"]

_SAMPLE = 20_000  # numbers kept per feature for its histogram (min, max and mean are exact)
_DISTINCT = 10_000  # distinct values counted per feature; past it the top values are approximate
_LONGEST = 100  # bytes values longer than this are not counted as values
_BINS = 20
_TOP = 10


class _Feature:
    def __init__(self) -> None:
        self.present = 0
        self.kinds: Counter[str] = Counter()
        self.lengths: Counter[int] = Counter()
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.sample: list[float] = []
        self.top: Counter[Any] = Counter()
        self.approximate = False
        self.images = 0

    def add(self, kind: str, values: list[Any]) -> None:
        self.present += 1
        self.kinds[kind] += 1
        self.lengths[len(values)] += 1
        if kind in ("int64", "float"):
            finite = [v for v in values if math.isfinite(v)]
            if finite:
                self.count += len(finite)
                self.total += math.fsum(finite)
                self.low, self.high = min(self.low, *finite), max(self.high, *finite)
                self.sample.extend(finite[: _SAMPLE - len(self.sample)])
        for value in values[: _TOP * 10]:
            if kind == "bytes" and (len(value) > _LONGEST or image_type(value)):
                self.images += image_type(value) is not None
                continue
            if value in self.top or len(self.top) < _DISTINCT:
                self.top[value] += 1
            else:
                self.approximate = True

    def report(self, key: str, records: int) -> dict[str, Any]:
        kind = self.kinds.most_common(1)[0][0]
        out: dict[str, Any] = {
            "key": key,
            "kind": "/".join(sorted(self.kinds)),
            "present": self.present,
            "missing": records - self.present,
            "lengths": {
                "min": min(self.lengths),
                "max": max(self.lengths),
                "counts": sorted(self.lengths.items())[:_BINS],
            },
            "top": [[json_value(kind, v), n] for v, n in self.top.most_common(_TOP)],
            "approximate": self.approximate,
            "images": self.images,
        }
        if self.count:
            out["numbers"] = {
                "min": self.low,
                "max": self.high,
                "mean": self.total / self.count,
                "histogram": _histogram(self.sample, self.low, self.high),
            }
        return out


def _histogram(sample: list[float], low: float, high: float) -> dict[str, list[float]]:
    """Equal-width bins from ``low`` to ``high`` (one bin when they are equal)."""
    bins = 1 if high == low else _BINS
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for value in sample:
        counts[min(bins - 1, int((value - low) / width))] += 1
    return {"edges": [low + i * width for i in range(bins + 1)], "counts": [float(c) for c in counts]}


class FeatureStatistics:
    """Statistics of every feature of the records added so far.

    Example:
        >>> stats = FeatureStatistics()
        >>> stats.add({"label": ("int64", [3])})
        >>> stats.report()["features"][0]["top"]
        [[3, 1]]
    """

    def __init__(self) -> None:
        self.records = 0
        self.features: dict[str, _Feature] = {}

    def add(self, features: Mapping[str, tuple[str, list[Any]]] | None) -> None:
        """Adds one record's features (None: a record that is not an Example, counted only)."""
        self.records += 1
        for key, (kind, values) in (features or {}).items():
            self.features.setdefault(key, _Feature()).add(kind, values)

    def report(self) -> dict[str, Any]:
        """``{"records": n, "features": [per feature, sorted by key]}``."""
        return {
            "records": self.records,
            "features": [self.features[key].report(key, self.records) for key in sorted(self.features)],
        }
