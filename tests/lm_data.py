"""Language-model data for the tests of tt.pack and tt.bucket: seqio-layout shards written here, and
what a packed row or a bucket's batch says about the sequences in it.

Record ``r``'s tokens say where they come from: ``inputs[j] = r * 1000 + j`` and ``targets[j] =
r * 1000 + 500 + j`` (int64, as seqio writes T5 data), so every token of a row names its record
and its place in the sequence.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import torch_tfrecord as tt

KEYS = ("inputs", "targets")
BASE = {"inputs": 0, "targets": 500}
SPEC = {"inputs": tt.VarLen(torch.int64), "targets": "int"}


def tokens(record: int, key: str, count: int) -> list[int]:
    return [record * 1000 + BASE[key] + j for j in range(count)]


def write_lm(folder: Path, lengths: np.ndarray, shards: int = 3) -> list[str]:
    """Shards of Examples with int64 ``inputs`` / ``targets`` of the given lengths ([records, 2]),
    records split over ``shards`` uneven files; the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    cuts = np.linspace(0, len(lengths), shards + 1).astype(int)
    cuts[1:-1] += np.arange(1, shards) % 2  # uneven
    paths = []
    for shard in range(shards):
        path = folder / f"lm-{shard:05d}-of-{shards:05d}.tfrecord"
        with tt.ExampleWriter(path) as writer:
            for record in range(cuts[shard], cuts[shard + 1]):
                writer.write(
                    {
                        key: tt.Int64List(tokens(record, key, int(lengths[record, k])))
                        for k, key in enumerate(KEYS)
                    }
                )
        paths.append(str(path))
    return paths


Piece = tuple[int, str, int, int]  # record, key, first token, end


def row_pieces(
    batch: dict[str, Any], keys: Sequence[str] = KEYS, pad_id: int = 0
) -> list[list[tuple[int, dict[str, tuple[int, int]]]]]:
    """Each row's pieces: ``(record, {key: (start, stop)})`` per segment, checked to be well formed:
    a segment's tokens contiguous, of one record, in order; positions 0, 1, ... from the piece's
    start; one record per segment id across the keys; padding rows (and the tails) empty."""
    padding = batch["_padding"].reshape(-1).tolist()
    rows = []
    for row, pad in enumerate(padding):
        segments: dict[int, tuple[int, dict[str, tuple[int, int]]]] = {}
        for key in keys:
            values = batch[key].reshape(len(padding), -1)[row].numpy()
            ids = batch[f"{key}_segment_ids"].reshape(len(padding), -1)[row].numpy()
            positions = batch[f"{key}_positions"].reshape(len(padding), -1)[row].numpy()
            assert ids.dtype == np.int32 and positions.dtype == np.int32
            used = int((ids > 0).sum())
            assert (ids[used:] == 0).all() and (values[used:] == pad_id).all(), (
                f"row {row}: a gap before its end"
            )
            if pad:
                assert used == 0, f"padding row {row} holds tokens"
            assert (np.diff(ids[:used]) >= 0).all()
            for segment in np.unique(ids[:used]).tolist():
                where = np.flatnonzero(ids == segment)
                assert (np.diff(where) == 1).all()
                found = values[where]
                record = int(found[0]) // 1000
                start = int(found[0]) - record * 1000 - BASE[key]
                assert found.tolist() == tokens(record, key, start + len(found))[start:], (row, key, segment)
                assert positions[where].tolist() == list(range(len(where)))
                known = segments.setdefault(segment, (record, {}))
                assert known[0] == record, f"row {row}: segment {segment} holds two records"
                known[1][key] = (start, start + len(found))
        assert sorted(segments) == list(range(1, len(segments) + 1))
        rows.append([segments[s] for s in sorted(segments)])
    return rows


def token_counts(
    rows: Iterable[list[tuple[int, dict[str, tuple[int, int]]]]],
) -> collections.Counter[tuple[int, str, int]]:
    """How often each token (record, key, place) appears in the rows."""
    counts: collections.Counter[tuple[int, str, int]] = collections.Counter()
    for row in rows:
        for record, spans in row:
            for key, (start, stop) in spans.items():
                counts.update((record, key, j) for j in range(start, stop))
    return counts


def all_tokens(
    lengths: np.ndarray, records: Iterable[int] | None = None
) -> collections.Counter[tuple[int, str, int]]:
    chosen = range(len(lengths)) if records is None else records
    return collections.Counter(
        (r, key, j) for r in chosen for k, key in enumerate(KEYS) for j in range(int(lengths[r, k]))
    )
