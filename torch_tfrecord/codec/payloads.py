"""What the datasets make of a record's bytes: raw payloads and SequenceExamples.

Examples are the datasets' default and their fast path
(:class:`~torch_tfrecord.data.decoding.BatchDecoder` decodes them itself). The other kinds of
record are a :class:`Payload`: it turns a batch of records into columns, and splits columns
back into samples.

- :class:`RawPayload` (``spec="raw"``): each record's bytes, untouched, under ``"record"``,
  for a transform that parses its own format (another protobuf, JSON, serialized tensors).
- :class:`SequencePayload` (``context_spec=`` / ``sequence_spec=``): ``tf.train.SequenceExample``
  records. A batch holds the context columns and the feature lists, padded as TensorFlow's
  ``tf.io.parse_sequence_example`` pads them, and the step counts under ``"_lengths"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from ..errors import SpecError
from .decode import SpecArg, decode_sequence_batch
from .rows import split_batch
from .spec import FeatureSpec, FixedLenSequence, VarLen, normalize_spec

__all__ = [
    "LENGTHS_KEY",
    "RAW",
    "RECORD_KEY",
    "Payload",
    "RawPayload",
    "SequencePayload",
    "payload_for",
]

RAW = "raw"
"""``spec="raw"``: the datasets yield each record's bytes."""
RECORD_KEY = "record"
"""Key of a record's bytes with ``spec="raw"``."""
LENGTHS_KEY = "_lengths"
"""Key of the step counts of the sequence features (feature list key -> int64 per record)."""


class Payload:
    """Columns of a batch of records, and the samples of those columns."""

    reserved: ClassVar[frozenset[str]] = frozenset()
    """Keys that the payload adds to every batch (besides ``_record_id`` and ``_padding``)."""

    def keys(self) -> set[str]:
        """The feature keys of the records' columns."""
        return set()

    def decode(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def split(self, batch: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
        """The samples of a batch that :meth:`decode` made."""
        return split_batch(batch, size)


@dataclasses.dataclass(frozen=True)
class RawPayload(Payload):
    """Each record's bytes: ``{"record": [bytes, ...]}`` per batch, ``{"record": bytes}`` per sample."""

    reserved: ClassVar[frozenset[str]] = frozenset({RECORD_KEY})

    def decode(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> dict[str, Any]:
        return {RECORD_KEY: [bytes(record) for record in records]}


@dataclasses.dataclass(frozen=True)
class SequencePayload(Payload):
    """SequenceExamples: the context features and the feature lists of each record.

    A batch: context columns as for Examples; a FixedLenSequence numeric feature list as a
    ``[B, max_steps, *shape]`` tensor padded with its default (0 when None), as TensorFlow's
    ``parse_sequence_example`` pads it; bytes / str feature lists as per-record lists of steps;
    a VarLen feature list as a list of per-record :class:`Ragged` (steps of any length);
    ``"_lengths"``: ``{key: int64 tensor [B]}``, the steps of every feature list.

    A sample: each FixedLenSequence feature list as ``[steps, *shape]`` (unpadded), the others
    as in a batch's row, and ``"_lengths"``: ``{key: int64 scalar tensor}``.
    """

    context_spec: dict[str, FeatureSpec]
    sequence_spec: dict[str, FixedLenSequence | VarLen]
    reserved: ClassVar[frozenset[str]] = frozenset({LENGTHS_KEY})

    def keys(self) -> set[str]:
        return set(self.context_spec) | set(self.sequence_spec)

    def decode(self, records: Sequence[bytes], locations: Sequence[str] | None = None) -> dict[str, Any]:
        context, sequences, lengths = decode_sequence_batch(
            records, self.context_spec, self.sequence_spec, locations=locations
        )
        return {**context, **sequences, LENGTHS_KEY: lengths}

    def split(self, batch: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
        lengths = batch[LENGTHS_KEY]
        samples = split_batch({k: v for k, v in batch.items() if k != LENGTHS_KEY}, size)
        padded = [k for k, v in batch.items() if k in self.sequence_spec and isinstance(v, torch.Tensor)]
        for i, sample in enumerate(samples):
            steps = {key: counts[i] for key, counts in lengths.items()}
            for key in padded:  # the sample's own steps, not the batch's padding
                sample[key] = sample[key][: int(steps[key])]
            sample[LENGTHS_KEY] = steps
        return samples


def payload_for(spec: Any, context_spec: SpecArg, sequence_spec: SpecArg) -> Payload | None:
    """The payload the dataset arguments ask for; None for Examples (decoded by ``spec``).

    Raises:
        ValueError: ``spec`` given with ``context_spec`` / ``sequence_spec``.
        SpecError: a key is both a context and a sequence key, or a sequence spec is not a
            FixedLenSequence / VarLen.
    """
    if context_spec is None and sequence_spec is None:
        if isinstance(spec, str):
            if spec != RAW:
                raise SpecError(f"spec={spec!r}: a string spec must be {RAW!r} (each record's bytes)")
            return RawPayload()
        return None
    if spec is not None:
        raise ValueError(
            "spec= is for Examples (or 'raw'); context_spec= / sequence_spec= are for SequenceExamples: "
            "give one or the other"
        )
    context = normalize_spec(context_spec or {}) or {}
    sequences = normalize_spec(sequence_spec or {}) or {}
    both = sorted(set(context) & set(sequences))
    if both:
        raise SpecError(f"key {both[0]!r} is both a context key and a sequence key; a key can be only one")
    for key, value in sequences.items():
        if not isinstance(value, FixedLenSequence | VarLen):
            raise SpecError(f"sequence feature {key!r}: use FixedLenSequence or VarLen, got {value!r}")
    return SequencePayload(context, sequences)  # type: ignore[arg-type]
