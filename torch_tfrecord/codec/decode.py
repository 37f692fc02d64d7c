"""Decoding serialized Examples / SequenceExamples into tensors, batch first.

:func:`decode_batch` is the hot path: one call turns a batch of serialized records into
columns (one tensor, Ragged or list per feature), with no per-record dict built and thrown
away. :func:`decode_example` is that call with a batch of one.

This module only picks a backend: the native extension (:mod:`torch_tfrecord.codec.native`) when it
is built and takes the spec, else the protobuf runtime (:mod:`torch_tfrecord.codec.protobuf`). Both
turn records into the same columns and share :mod:`torch_tfrecord.codec.assemble` for the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch

from ..errors import FeatureError, SpecError
from . import native
from . import protobuf as _protobuf
from .ragged import Ragged
from .spec import FixedLenSequence, VarLen, normalize_spec

__all__ = [
    "decode_batch",
    "decode_example",
    "decode_sequence_batch",
    "decode_sequence_example",
]

logger = logging.getLogger(__name__)

SpecArg = Mapping[str, Any] | None
Locations = Sequence[str] | None


def decode_batch(
    records: Sequence[bytes],
    spec: SpecArg = None,
    *,
    locations: Locations = None,
    dtypes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Decodes a batch of serialized Examples into columns.

    Args:
        records: serialized ``tf.train.Example`` messages.
        spec: feature key -> :class:`FixedLen` / :class:`VarLen` / :class:`FixedLenSequence` /
            :class:`RawTensor` / :class:`Image` or a shorthand (``"int"``, ``"float"``,
            ``"bytes"``); None decodes every feature as a VarLen of the type it holds.
        locations: a description of each record for error messages, e.g.
            ``"record 17 of 'train.tfrecord'"`` (default: its position in the batch).
        dtypes: with ``spec=None``, the type of keys whose Features in this batch hold no list
            (present, no kind set: an empty CSV cell in TFX), e.g. from
            :func:`torch_tfrecord.codec.schema.sample_dtypes` over other records; a key typed by
            neither comes back as an empty float32 VarLen. The datasets sample their shards.

    Returns:
        Per feature: FixedLen numeric -> tensor ``[B, *shape]``; VarLen / FixedLenSequence numeric
        -> :class:`Ragged`; bytes / str -> a list per record; RawTensor -> a stacked tensor when its
        shape is static, else a list of tensors; Image -> a list of uint8 CHW tensors.

    Raises:
        ExampleDecodeError: a record is not a valid Example.
        MissingFeatureError, FeatureTypeError, FeatureShapeError: naming the key and record.

    Example:
        >>> spec = {"label": FixedLen((), torch.int64), "tokens": "int"}
        >>> batch = decode_batch(records, spec)  # doctest: +SKIP
        >>> batch["label"].shape, len(batch["tokens"])  # doctest: +SKIP
        (torch.Size([256]), 256)
    """
    if locations is not None and len(locations) != len(records):
        raise ValueError(f"{len(locations)} locations for {len(records)} records")
    normalized = normalize_spec(spec)
    if normalized is None or not records:
        return _protobuf.decode_examples(records, normalized, locations, dtypes)
    return _native_else_reference(
        lambda: native.decode_examples(records, normalized, locations),
        lambda: _protobuf.decode_examples(records, normalized, locations),
    )


_T = TypeVar("_T")


def _native_else_reference(native_call: Callable[[], _T | None], reference: Callable[[], _T]) -> _T:
    """The native decoder's result when it runs and takes the batch; else the protobuf decoder's.

    A batch the native decoder rejects goes to the protobuf decoder, which raises the exact
    error (class, key, record, message). Should protobuf accept it, the two disagree: that is
    logged loudly, and the protobuf result is used.
    """
    rejected = None
    if native.decoder() == "native":
        try:
            decoded = native_call()
        except (native.Rejected, FeatureError) as error:
            rejected = error
        else:
            if decoded is not None:
                return decoded
    result = reference()
    if rejected is not None:
        logger.warning(
            "the native decoder rejected a batch that the protobuf decoder accepts (%s); using the "
            "protobuf result. Please report this with the records.",
            rejected,
        )
    return result


def _unbatch(value: Any) -> Any:
    if isinstance(value, torch.Tensor | Ragged | list):
        return value[0]
    raise AssertionError(f"unexpected column type {type(value).__name__}")


def decode_example(record: bytes, spec: SpecArg = None, *, location: str | None = None) -> dict[str, Any]:
    """Decodes one serialized Example: :func:`decode_batch` with a batch of one.

    Returns:
        Per feature: FixedLen -> tensor of ``shape`` (``bytes`` / ``str`` for shape ``()``);
        VarLen / FixedLenSequence -> 1-D (or ``[steps, *shape]``) tensor, or a list of bytes / str;
        RawTensor / Image -> a tensor.

    Example:
        >>> decode_example(encode_example({"label": 3}), {"label": FixedLen((), torch.int64)})
        {'label': tensor(3)}
    """
    batch = decode_batch([record], spec, locations=None if location is None else [location])
    return {key: _unbatch(value) for key, value in batch.items()}


def _sequence_spec(spec: Mapping[str, Any]) -> dict[str, FixedLenSequence | VarLen]:
    normalized = normalize_spec(spec) or {}
    for key, value in normalized.items():
        if not isinstance(value, FixedLenSequence | VarLen):
            raise SpecError(f"sequence feature {key!r}: use FixedLenSequence or VarLen, got {value!r}")
    return normalized  # type: ignore[return-value]


def _parse_sequences(
    records: Sequence[bytes],
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    locations: Locations,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    if locations is not None and len(locations) != len(records):
        raise ValueError(f"{len(locations)} locations for {len(records)} records")
    context_specs = normalize_spec(context_spec or {}) or {}
    sequence_specs = _sequence_spec(sequence_spec)

    def reference() -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
        return _protobuf.decode_sequences(records, context_specs, sequence_specs, locations)

    if not records:
        return reference()
    return _native_else_reference(
        lambda: native.decode_sequences(records, context_specs, sequence_specs, locations), reference
    )


def decode_sequence_example(
    record: bytes,
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    *,
    location: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Decodes one serialized SequenceExample.

    Args:
        record: a serialized ``tf.train.SequenceExample``.
        context_spec: specs of the context features (as for :func:`decode_example`).
        sequence_spec: feature list key -> :class:`FixedLenSequence` (each step ``shape``) or
            :class:`VarLen` (steps of any length).

    Returns:
        ``(context, sequences)``: a FixedLenSequence becomes a ``[steps, *shape]`` tensor (a list
        of bytes / str per step for those dtypes), a VarLen a :class:`Ragged` of its steps.
    """
    context, sequences, _ = _parse_sequences(
        [record], context_spec, sequence_spec, None if location is None else [location]
    )
    return {k: _unbatch(v) for k, v in context.items()}, {k: _unbatch(v) for k, v in sequences.items()}


def decode_sequence_batch(
    records: Sequence[bytes],
    context_spec: SpecArg,
    sequence_spec: Mapping[str, Any],
    *,
    locations: Locations = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """Decodes a batch of SequenceExamples, padded like TensorFlow's ``parse_sequence_example``.

    Returns:
        ``(context, sequences, lengths)``: context columns as :func:`decode_batch`; each
        FixedLenSequence numeric feature as a ``[B, max_steps, *shape]`` tensor padded with its
        default (0 when None); bytes / str features as per-record lists of steps; VarLen
        features as a list of per-record :class:`Ragged`; ``lengths[key]`` the int64 step count
        of each record.
    """
    context, sequences, lengths = _parse_sequences(records, context_spec, sequence_spec, locations)
    spec = _sequence_spec(sequence_spec)
    for key, value in sequences.items():
        feature_spec = spec[key]
        if isinstance(value, Ragged) and isinstance(feature_spec, FixedLenSequence):
            padding = 0 if feature_spec.default is None else feature_spec.default[0]
            sequences[key] = value.to_padded(padding)
    return context, sequences, lengths
