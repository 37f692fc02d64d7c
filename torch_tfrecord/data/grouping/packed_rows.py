"""Packed rows as seqio and t5x lay them out, assembled in a few numpy passes per batch.

For each packed key, ``<key>``: the tokens, padded; ``<key>_segment_ids``: 0 for padding, then
1, 2, ... for the pieces of a row in order; ``<key>_positions``: each token's place in its
piece, from 0 (a piece of a cut sequence starts again at 0, as grain's packers do).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ...errors import FeatureTypeError
from .group_datasets import Pieces
from .lengths import TokenColumn

__all__ = ["assemble_rows", "output_keys", "sample_columns"]


def output_keys(key: str) -> tuple[str, str, str]:
    """The keys of a packed row for token key ``key``: tokens, segment ids, positions."""
    return key, f"{key}_segment_ids", f"{key}_positions"


def sample_columns(
    samples: Sequence[Mapping[str, Any]], keys: Sequence[str], describe: Callable[[int], str]
) -> dict[str, TokenColumn]:
    """Each key's tokens of ``samples`` (after the dataset's transform) as one column.

    Raises:
        FeatureTypeError: a sample whose key is not a 1-D integer tensor, naming the key and record.
    """
    columns: dict[str, TokenColumn] = {}
    for key in keys:
        parts = []
        for at, sample in enumerate(samples):
            value = sample.get(key)
            array = value.numpy() if isinstance(value, torch.Tensor) else value
            if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in "iu":
                found = (
                    type(value).__name__
                    if not isinstance(array, np.ndarray)
                    else f"{array.ndim}-D {array.dtype}"
                )
                raise FeatureTypeError(
                    f"key {key!r} of {describe(at)} is not a 1-D integer tensor after the dataset's "
                    f"transform (found {found})",
                    key=key,
                    record=describe(at),
                )
            parts.append(array)
        lengths = np.asarray([len(part) for part in parts], dtype=np.int64)
        values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        columns[key] = values, lengths
    return columns


def assemble_rows(
    columns: Mapping[str, TokenColumn],
    keys: Sequence[str],
    capacities: Sequence[int],
    pieces: Pieces,
    rows: int,
    pad_id: int,
    blank: npt.NDArray[np.bool_] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """``rows`` packed rows of each key (``[rows, capacity]``) from the pieces' tokens.

    Args:
        columns: each key's tokens of the sequences ``pieces.ids`` (values, and counts per sequence).
        keys, capacities: the token keys and their row lengths.
        pieces: what goes where; ``pieces.owner`` is each piece's row (in ``[0, rows)``, grouped
            and in order). Rows without pieces stay padding.
        pad_id: the tokens of padding.
        blank: sequences (of ``pieces.ids``) whose pieces stay padding (damaged records skipped).
    """
    if blank is not None and blank.any():  # left out before the segments are numbered
        keep = ~blank[pieces.sequence]
        pieces = dataclasses.replace(
            pieces, owner=pieces.owner[keep], sequence=pieces.sequence[keep], starts=pieces.starts[keep],
            stops=pieces.stops[keep],
        )  # fmt: skip
    owner = pieces.owner
    count = len(owner)
    first = np.searchsorted(owner, owner, side="left")  # each piece's row's first piece
    segments = (np.arange(count, dtype=np.int64) - first + 1).astype(np.int32)
    out: dict[str, npt.NDArray[Any]] = {}
    for k, key in enumerate(keys):
        values, lengths = columns[key]
        capacity = int(capacities[k])
        counts = pieces.stops[:, k] - pieces.starts[:, k]
        ends = np.cumsum(counts)
        begins = ends - counts
        total = int(ends[-1]) if count else 0
        within = np.arange(total, dtype=np.int64) - np.repeat(begins, counts)
        target = np.repeat(owner * capacity + begins - begins[first], counts) + within
        source = (
            np.repeat((np.cumsum(lengths) - lengths)[pieces.sequence] + pieces.starts[:, k], counts) + within
        )
        token_key, segment_key, position_key = output_keys(key)
        tokens = np.full((rows, capacity), pad_id, dtype=values.dtype)
        segment_ids = np.zeros((rows, capacity), dtype=np.int32)
        positions = np.zeros((rows, capacity), dtype=np.int32)
        tokens.reshape(-1)[target] = values[source]
        segment_ids.reshape(-1)[target] = np.repeat(segments, counts)
        positions.reshape(-1)[target] = within
        out[token_key], out[segment_key], out[position_key] = tokens, segment_ids, positions
    return out
