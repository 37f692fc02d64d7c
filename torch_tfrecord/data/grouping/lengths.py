"""Token sequences in decoded columns, and the table of a dataset's sequence lengths, read once.

Packing and length buckets plan each epoch from the lengths of its sequences, so they need every
record's lengths before the first epoch: :func:`read_lengths` decodes only the keys that are
packed (the native decoder's columns hold the lengths), batch by batch, and checks that each is
a 1-D integer sequence (a VarLen or FixedLenSequence int feature of an Example, a context
feature or a feature list of single ints of a SequenceExample). The table (one int32 per record
and key) lives in memory beside the dataset, and in a cache directory when one is given (one
small file per data and keys, written atomically: every rank and later job reads it instead of
the records).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ...codec.payloads import LENGTHS_KEY, SequencePayload
from ...codec.ragged import Ragged
from ...codec.spec import FeatureSpec, FixedLen, FixedLenSequence, VarLen
from ...errors import FeatureShapeError, FeatureTypeError, SpecError
from ...records.atomic import atomic_write
from ...records.io import PathLike
from ..dataset import TFRecordDataset
from ..decoding import BatchDecoder

__all__ = ["TokenColumn", "check_lengths", "keys_decoder", "read_lengths", "token_column"]

logger = logging.getLogger(__name__)

_SCAN = 4096  # records decoded at once while reading the lengths
TokenColumn = tuple[npt.NDArray[Any], npt.NDArray[np.int64]]
"""A key's tokens of some records: all values in one array, and each record's count."""


def _is_sequence(feature: FeatureSpec, in_list: bool) -> bool:
    """Whether ``feature`` decodes to a 1-D sequence of ints (``in_list``: a SequenceExample feature list)."""
    dtype = getattr(feature, "dtype", None)
    integer = isinstance(dtype, torch.dtype) and not dtype.is_floating_point and dtype is not torch.bool
    if not integer:
        return False
    if in_list:
        return isinstance(feature, FixedLenSequence) and tuple(feature.shape) == ()
    if isinstance(feature, FixedLen):
        return len(feature.shape) == 1
    if isinstance(feature, FixedLenSequence):
        return tuple(feature.shape) == ()
    return isinstance(feature, VarLen)


def _spec_of(key: str, spec: Mapping[str, FeatureSpec] | None, in_list: bool, where: str) -> FeatureSpec:
    if spec is None:
        return VarLen(torch.int64)  # spec=None: each record's values say (floats fail, naming the record)
    if key not in spec:
        raise SpecError(f"key {key!r} is not in {where} (its keys: {sorted(spec)})")
    feature = spec[key]
    if not _is_sequence(feature, in_list):
        raise SpecError(
            f"key {key!r} of {where} is {feature!r}, not a 1-D integer sequence: packing and buckets "
            "take VarLen or FixedLenSequence((), int) features (feature lists of single ints)"
        )
    return feature


def keys_decoder(dataset: TFRecordDataset, keys: Sequence[str]) -> BatchDecoder:
    """A decoder of ``dataset``'s records that decodes only ``keys`` (checked to be integer sequences).

    Raises:
        SpecError: a key missing from the dataset's spec, or not a 1-D integer sequence.
    """
    decoder = dataset._decoder
    verify_crc, on_error = decoder.verify_crc, decoder.on_error
    payload = decoder.payload
    if payload is None:
        spec = {key: _spec_of(key, decoder.feature_spec, False, "the dataset's spec") for key in keys}
        return BatchDecoder(dataset.files, spec, verify_crc=verify_crc, on_error=on_error)
    if not isinstance(payload, SequencePayload):
        raise SpecError(f"the dataset decodes no features ({type(payload).__name__}): nothing to pack")
    context: dict[str, FeatureSpec] = {}
    lists: dict[str, FixedLenSequence | VarLen] = {}
    for key in keys:
        if key in payload.sequence_spec:
            lists[key] = _spec_of(key, payload.sequence_spec, True, "the sequence_spec")  # type: ignore[assignment]
        else:
            context[key] = _spec_of(key, payload.context_spec, False, "the context_spec or sequence_spec")
    return BatchDecoder(
        dataset.files, None, payload=SequencePayload(context, lists), verify_crc=verify_crc, on_error=on_error
    )


def token_column(batch: dict[str, Any], key: str, size: int, describe: Callable[[int], str]) -> TokenColumn:
    """``batch[key]`` (decoded, or collated from samples) as all values and each row's count.

    Raises:
        FeatureTypeError: the column is not a 1-D integer sequence per row, naming the key and
            the batch's first record (``describe(0)``).
    """
    column = batch.get(key)
    lengths_of = batch.get(LENGTHS_KEY)
    values: torch.Tensor | None = None
    if isinstance(column, Ragged) and column.values.dim() == 1:
        values, lengths = column.values, column.lengths
    elif isinstance(column, torch.Tensor) and column.dim() == 2 and len(column) == size:
        if isinstance(lengths_of, dict) and key in lengths_of:  # a feature list, padded to the longest
            lengths = torch.as_tensor(lengths_of[key], dtype=torch.int64)
            values = column[torch.arange(column.shape[1]) < lengths[:, None]]
        else:
            values, lengths = column.reshape(-1), torch.full((size,), column.shape[1], dtype=torch.int64)
    if values is None or values.is_floating_point() or values.dtype in (torch.bool, torch.complex64):
        found = type(column).__name__ if values is None else f"{type(column).__name__} of {values.dtype}"
        raise FeatureTypeError(
            f"key {key!r} of {describe(0)} is not a 1-D integer sequence (found {found})",
            key=key,
            record=describe(0),
        )
    return values.numpy(), lengths.numpy().astype(np.int64)


def _describer(describe: Callable[[int], str], ids: npt.NDArray[np.int64]) -> Callable[[int], str]:
    """What names the record at each place of a batch of ``ids``."""
    return lambda at: describe(int(ids[at]))


def read_lengths(
    dataset: TFRecordDataset, keys: Sequence[str], cache: PathLike | None = None
) -> tuple[npt.NDArray[np.int32], int]:
    """The token count of each key of every record of ``dataset`` (``[records, keys]``), and
    how many damaged records were skipped (``on_error="skip"``: counted as empty).

    Args:
        cache: a directory that keeps the table of each data (files, sizes, record counts) and
            keys: read from there when present, else read from the records and saved there.

    Raises:
        SpecError, FeatureTypeError: a key that is not a 1-D integer sequence, naming the key
            (and the record, when its values say so).
    """
    decoder = keys_decoder(dataset, keys)
    path = None
    if cache is not None:
        name = hashlib.sha256(f"{dataset.files.fingerprint}\0{list(keys)}".encode()).hexdigest()[:32]
        path = os.path.join(os.fspath(cache), f"lengths-{name}.npz")
        saved = _saved_lengths(path, dataset.files.num_records, len(keys))
        if saved is not None:
            return saved
    table, skipped = _read_lengths(dataset, keys, decoder)
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path) as file:
            np.savez(file, table=table, skipped=np.int64(skipped))
    return table, skipped


def _saved_lengths(path: str, records: int, keys: int) -> tuple[npt.NDArray[np.int32], int] | None:
    """A lengths table saved at ``path`` for ``records`` x ``keys``; None if there is none that fits."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            table, skipped = saved["table"], int(saved["skipped"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError) as error:
        logger.warning("ignoring the lengths table %s (%s): reading the lengths again", path, error)
        return None
    if table.shape != (records, keys) or table.dtype != np.int32:
        logger.warning(
            "ignoring the lengths table %s: it holds %s, not %d x %d", path, table.shape, records, keys
        )
        return None
    return table, skipped


def _read_lengths(
    dataset: TFRecordDataset, keys: Sequence[str], decoder: BatchDecoder
) -> tuple[npt.NDArray[np.int32], int]:
    files = dataset.files
    total = files.num_records
    table = np.zeros((total, len(keys)), dtype=np.int32)
    skipped = 0
    for start in range(0, total, _SCAN):
        ids = np.arange(start, min(total, start + _SCAN), dtype=np.int64)
        batch, read_ids, stand_in = decoder.decode(ids, np.zeros(len(ids), dtype=bool))
        describe = _describer(files.describe, read_ids)
        for k, key in enumerate(keys):
            _, lengths = token_column(batch, key, len(ids), describe)
            table[start : start + len(ids), k] = np.where(stand_in, 0, lengths)
        skipped += int(stand_in.sum())
    files.close()  # the workers open their own
    if total >= 100 * _SCAN:
        logger.info("read the lengths of %s in %d records", list(keys), total)
    return table, skipped


def check_lengths(
    found: npt.NDArray[np.int64],
    expected: npt.NDArray[np.int64],
    keys: Sequence[str],
    describe: Callable[[int], str],
) -> None:
    """Raises when sequences read now have other lengths than the table planned with.

    Raises:
        FeatureShapeError: naming the key and the record.
    """
    wrong = np.argwhere(found != expected)
    if len(wrong):
        at, k = (int(i) for i in wrong[0])
        raise FeatureShapeError(
            f"key {keys[k]!r} of {describe(at)} has {int(found[at, k])} tokens, but {int(expected[at, k])} "
            "when the lengths were read: a transform that changes the sequences' lengths (packing plans "
            "with the decoded lengths; change them in a transform of the packed rows instead), or files "
            "rewritten since",
            key=keys[k],
            record=describe(at),
        )
