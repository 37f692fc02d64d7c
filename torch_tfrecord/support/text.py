"""Text for people: counts with their nouns, and progress bars where the caller asks for them."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["plural", "progress_bar"]


def progress_bar(total: int | None, unit: str, enabled: bool) -> Any:
    """A tqdm bar on stderr when tqdm is installed and wanted, else None (``total`` None: a count)."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless it is 1: ``1 shard``, ``2 shards``, ``1,000 indexes``.

    Args:
        count: how many.
        noun: the singular.
        plural_form: the plural when it is not ``noun + "s"`` (``"indexes"``).
    """
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"
