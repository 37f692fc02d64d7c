"""Shards whose records carry their own id: the tests' way to see which records a loader gave."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch_tfrecord as tt


def write_id_shards(
    folder: Path,
    sizes: Sequence[int],
    *,
    prefix: str = "part",
    first: int = 0,
    extra: Callable[[int], dict[str, Any]] | None = None,
) -> str:
    """Writes ``{prefix}-{i}.tfrecord`` (each with its index) holding ``sizes[i]`` records, numbered
    by the feature "id" from ``first`` on, with ``extra(id)``'s features beside it; returns their glob."""
    folder.mkdir(parents=True, exist_ok=True)
    record = first
    for shard, size in enumerate(sizes):
        with tt.ExampleWriter(folder / f"{prefix}-{shard}.tfrecord") as writer:
            for _ in range(size):
                writer.write({"id": record, **(extra(record) if extra else {})})
                record += 1
    return str(folder / f"{prefix}-*.tfrecord")
