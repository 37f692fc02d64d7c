"""Proposing a feature spec from the records themselves.

What the records show is found without torch (:mod:`torch_tfrecord.codec.survey`); here the
proposals become spec objects: a spec dict for Examples, a context spec and a sequence spec for
SequenceExamples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from google.protobuf.message import DecodeError

from ..proto import Example
from ..records.io import PathLike, StorageOptions
from .spec import FeatureSpec, FixedLen, FixedLenSequence, Image, VarLen
from .survey import Proposal, Survey, format_spec_code, survey_paths, survey_records

__all__ = [
    "InferredSequenceSpec",
    "InferredSpec",
    "infer_spec",
    "infer_spec_from_records",
    "sample_dtypes",
    "specs_from_survey",
]

_DTYPES: dict[str, Any] = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": bytes}


class InferredSpec(dict[str, FeatureSpec]):
    """A spec dict whose ``repr`` is code to paste (``import torch, torch_tfrecord as tt`` first).

    Attributes:
        notes: per key, what the spec alone does not say (e.g. the type was never seen).
        warnings: doubts about the records as a whole (e.g. they are probably not Examples).
    """

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[str, str] = {}
        self.warnings: list[str] = []

    def __repr__(self) -> str:
        entries = [(key, repr(spec), self.notes.get(key, "")) for key, spec in self.items()]
        return format_spec_code(entries, self.warnings)


def _indented(code: str) -> str:
    return code.replace("\n", "\n    ")


@dataclasses.dataclass(eq=False, repr=False)
class InferredSequenceSpec(Mapping[str, InferredSpec]):
    """What :func:`infer_spec` proposes for SequenceExamples: a context spec and a sequence spec.

    A mapping with the keys ``"context_spec"`` and ``"sequence_spec"``, so that
    ``tt.TFRecordDataset(paths, **specs)`` passes both; its ``repr`` is code to paste (that dict).

    Attributes:
        context_spec: the context features, as :func:`infer_spec` proposes them for Examples.
        sequence_spec: the feature lists: :class:`FixedLenSequence` or :class:`VarLen`.
        steps: per feature list, the fewest and the most steps of the records that have it.
    """

    context_spec: InferredSpec
    sequence_spec: InferredSpec
    steps: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """Doubts about the records as a whole."""
        return self.context_spec.warnings + self.sequence_spec.warnings

    def __getitem__(self, key: str) -> InferredSpec:
        if key == "context_spec":
            return self.context_spec
        if key == "sequence_spec":
            return self.sequence_spec
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("context_spec", "sequence_spec"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return (
            "{\n"
            f"    'context_spec': {_indented(repr(self.context_spec))},\n"
            f"    'sequence_spec': {_indented(repr(self.sequence_spec))},\n"
            "}"
        )


def _spec(proposal: Proposal) -> FeatureSpec:
    if proposal.kind == "Image":
        return Image("RGB")
    dtype = _DTYPES[proposal.wire]
    if proposal.kind == "FixedLen":
        return FixedLen(proposal.shape or (), dtype)
    if proposal.kind == "FixedLenSequence":
        return FixedLenSequence(proposal.shape or (), dtype, allow_missing=proposal.allow_missing)
    return VarLen(dtype)


def _inferred(proposals: Mapping[str, Proposal], warnings: Sequence[str]) -> InferredSpec:
    spec = InferredSpec()
    for key, proposal in proposals.items():
        spec[key] = _spec(proposal)
        if proposal.note:
            spec.notes[key] = proposal.note
    spec.warnings = list(warnings)
    return spec


def specs_from_survey(survey: Survey) -> InferredSpec | InferredSequenceSpec:
    """The spec objects of a :class:`~torch_tfrecord.codec.survey.Survey`'s proposals: a spec dict
    for Examples, an :class:`InferredSequenceSpec` for SequenceExamples."""
    context = _inferred(survey.proposals, survey.warnings)
    if survey.feature_lists is None:
        return context
    return InferredSequenceSpec(context, _inferred(survey.feature_lists, []), dict(survey.steps))


def infer_spec_from_records(
    records: Iterable[bytes], *, describe: Callable[[int], str] = lambda n: f"record {n}"
) -> InferredSpec | InferredSequenceSpec:
    """Proposes a spec for serialized Examples or SequenceExamples; see :func:`infer_spec`.

    Args:
        records: serialized Examples or SequenceExamples.
        describe: names the n-th record in error messages.
    """
    return specs_from_survey(survey_records(records, describe=describe))


def sample_dtypes(records: Iterable[bytes]) -> dict[str, Any]:
    """The type (torch.int64, torch.float32 or bytes) of each key, from the records that set a list.

    For ``spec=None`` decoding (:func:`torch_tfrecord.decode_batch`'s ``dtypes``): a key whose
    Features in one batch hold no list takes its type from here, so a column keeps one type from
    batch to batch. Forgiving, as a sample must be: records that are not Examples are passed
    over, and where records disagree the first wins (decoding such a batch raises anyway).
    """
    dtypes: dict[str, Any] = {}
    for record in records:
        try:
            example = Example.FromString(record)
        except DecodeError:
            continue
        for key, feature in example.features.feature.items():
            if key not in dtypes:
                which = feature.WhichOneof("kind")
                if which is not None:
                    dtypes[key] = _DTYPES[which]
    return dtypes


def infer_spec(
    paths: PathLike | Sequence[PathLike], max_records: int = 1000, storage_options: StorageOptions = None
) -> InferredSpec | InferredSequenceSpec:
    """Reads up to ``max_records`` Examples or SequenceExamples and proposes a spec for them.

    A feature present in every record with the same number of values becomes a
    :class:`FixedLen` (shape ``()`` for one value); one whose length varies, or that some records
    lack, a :class:`VarLen`; a bytes feature whose every value is a JPEG / PNG / GIF / BMP, an
    :class:`Image`. A key whose Features set no list in any record read (TFX's empty CSV
    cells) has no type to find: it becomes ``VarLen(torch.float32)`` with a ``type unknown`` note
    (``result.notes``). Records whose feature names hold control characters are probably another
    message that parses as an Example by accident: ``result.warnings`` says so. The ``repr`` of
    the result is valid Python, notes and warnings as comments.

    SequenceExamples (records that set feature lists) get an :class:`InferredSequenceSpec`:
    ``result.context_spec`` is proposed from the context features as above, and
    ``result.sequence_spec`` holds, per feature list, a :class:`FixedLenSequence` when every step
    holds the same number of values (shape ``()`` for one; ``allow_missing=True`` when some
    records lack the list), else a :class:`VarLen`. Pass both with
    ``tt.TFRecordDataset(paths, **result)``.

    Args:
        paths: files, globs or directories.
        max_records: how many records to look at, from the first files on.
        storage_options: for the fsspec file system of URLs.

    Example:
        >>> infer_spec("train-*.tfrecord")  # doctest: +SKIP
        {
            'image/encoded': tt.Image(mode='RGB'),
            'label': tt.FixedLen(shape=(), dtype=torch.int64),
        }
        >>> infer_spec("sequences.tfrecord")  # doctest: +SKIP
        {
            'context_spec': {
                'id': tt.FixedLen(shape=(), dtype=bytes),
            },
            'sequence_spec': {
                'frames': tt.FixedLenSequence(shape=(3,), dtype=torch.float32),
                'ids': tt.VarLen(dtype=torch.int64),
            },
        }
    """
    return specs_from_survey(survey_paths(paths, max_records, storage_options))
