"""What a sample of records shows about each feature: the spec to propose, without torch.

:func:`survey_records` reads serialized Examples and proposes, per key, a kind (FixedLen,
VarLen or Image), a wire type and a shape, as plain data and as the code of the spec. Records
that are SequenceExamples get the same for their context features, and a FixedLenSequence or
VarLen per feature list.
:mod:`torch_tfrecord.codec.schema` turns the proposals into spec objects (which need torch); the
``torch-tfrecord schema`` command prints them as they are, and so starts without torch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from google.protobuf.message import DecodeError

from ..errors import ExampleDecodeError, FeatureTypeError
from ..proto import Example
from ..records.io import PathLike, StorageOptions
from ..records.listing import expand_sources
from ..records.reader import read_records
from .inspect import as_sequence_example, doubt_keys, show_key

__all__ = ["Proposal", "Survey", "format_spec_code", "survey_paths", "survey_records"]

logger = logging.getLogger("torch_tfrecord.codec.schema")  # what infer_spec logs, it logs as schema

# The dtype each wire type decodes to, as spec code writes it.
DTYPE_CODE = {"int64_list": "torch.int64", "float_list": "torch.float32", "bytes_list": "bytes"}
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


@dataclasses.dataclass(frozen=True)
class Proposal:
    """The spec proposed for one key.

    Attributes:
        kind: ``"FixedLen"``, ``"VarLen"`` or ``"Image"``; for a feature list,
            ``"FixedLenSequence"`` or ``"VarLen"``.
        wire: ``"int64_list"``, ``"float_list"`` or ``"bytes_list"`` (``"float_list"`` as a
            placeholder when no record set a list).
        shape: the FixedLen shape (``()`` for one value), or the shape of one FixedLenSequence
            step; None for the others.
        note: what the spec alone does not say ("" when nothing).
        allow_missing: a FixedLenSequence whose feature list some records lack.
    """

    kind: Literal["FixedLen", "VarLen", "Image", "FixedLenSequence"]
    wire: str
    shape: tuple[int, ...] | None = None
    note: str = ""
    allow_missing: bool = False

    def arguments(self) -> str:
        """The spec's arguments as its ``repr`` writes them: ``shape=(), dtype=torch.int64``."""
        if self.kind == "Image":
            return "mode='RGB'"
        dtype = f"dtype={DTYPE_CODE[self.wire]}"
        if self.kind == "VarLen":
            return dtype
        missing = ", allow_missing=True" if self.allow_missing else ""
        return f"shape={self.shape!r}, {dtype}{missing}"

    def code(self) -> str:
        """The spec as code, equal to the ``repr`` of the spec object it stands for."""
        return f"tt.{self.kind}({self.arguments()})"


@dataclasses.dataclass
class Survey:
    """The proposals for every key (sorted), and doubts about the records as a whole.

    Attributes:
        proposals: per feature of the Examples, or of the SequenceExamples' context.
        warnings: doubts about the records as a whole.
        feature_lists: per feature list of the SequenceExamples; None when the records are
            Examples (none of them sets feature lists).
        steps: per feature list, the fewest and the most steps of the records that have it.
        records: how many records were read.
    """

    proposals: dict[str, Proposal] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    feature_lists: dict[str, Proposal] | None = None
    steps: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    records: int = 0

    def code(self) -> str:
        """The spec dict (of the Examples, or of the SequenceExamples' context) as code to paste,
        notes and warnings as comments."""
        entries = [(key, p.code(), p.note) for key, p in self.proposals.items()]
        return format_spec_code(entries, self.warnings)

    def sequence_code(self) -> str:
        """The sequence spec dict (feature lists) as code to paste, notes as comments."""
        entries = [(key, p.code(), p.note) for key, p in (self.feature_lists or {}).items()]
        return format_spec_code(entries, [])


def format_spec_code(entries: Sequence[tuple[str, str, str]], warnings: Sequence[str]) -> str:
    """A spec dict's code from ``(key, spec code, note)`` entries and warnings."""
    lines = [f"    # warning: {show_key(warning)}" for warning in warnings]
    for key, code, note in entries:
        lines.append(f"    {key!r}: {code},{f'  # {note}' if note else ''}")
    return "{\n" + "\n".join(lines) + "\n}" if lines else "{}"


@dataclasses.dataclass
class _Seen:
    kind: str | None = None
    lengths: set[int] = dataclasses.field(default_factory=set)
    present: int = 0
    empty: int = 0  # records where the Feature is present with no list set
    images: int = 0


@dataclasses.dataclass
class _SeenList:
    kind: str | None = None
    step_lengths: set[int] = dataclasses.field(default_factory=set)
    present: int = 0  # records that have the feature list
    empty_steps: int = 0  # steps (Features) with no list set
    steps: list[int] = dataclasses.field(default_factory=list)  # per record that has it


def _features_of(record: bytes, name: str) -> tuple[Any, Any | None]:
    """The features (an Example's, or a SequenceExample's context) and the feature lists (None
    for an Example) of a record."""
    sequence = as_sequence_example(record)
    if sequence is not None:
        return sequence.context.feature, sequence.feature_lists.feature_list
    try:
        example = Example.FromString(record)
    except DecodeError as error:
        raise ExampleDecodeError(
            f"{name} is not a serialized Example: {error}; if the file holds another "
            "message type, read its records as raw bytes with tt.read_records(path)"
        ) from None
    return example.features.feature, None


def _survey_lists(lists: Any, seen: dict[str, _SeenList], name: str) -> None:
    for key, feature_list in lists.items():
        entry = seen.setdefault(key, _SeenList())
        entry.present += 1
        entry.steps.append(len(feature_list.feature))
        for feature in feature_list.feature:
            which = feature.WhichOneof("kind")
            if which is None:
                entry.empty_steps += 1  # a step of zero values
                continue
            if entry.kind is not None and which != entry.kind:
                raise FeatureTypeError(
                    f"feature list {key!r} holds {which} in {name} but {entry.kind} before",
                    key=key,
                    record=name,
                )
            entry.kind = which
            entry.step_lengths.add(len(getattr(feature, which).value))


def survey_records(
    records: Iterable[bytes], *, describe: Callable[[int], str] = lambda n: f"record {n}"
) -> Survey:
    """Proposes a spec for serialized Examples or SequenceExamples; see
    :func:`torch_tfrecord.infer_spec`.

    The records are SequenceExamples when any of them sets feature lists
    (:func:`~torch_tfrecord.codec.inspect.as_sequence_example`); the others then are SequenceExamples
    without feature lists, which is how TensorFlow's ``parse_sequence_example`` reads them.

    Args:
        records: serialized Examples or SequenceExamples.
        describe: names the n-th record in error messages.
    """
    seen: dict[str, _Seen] = {}
    lists_seen: dict[str, _SeenList] = {}
    sequences = 0  # records that set feature lists
    total = 0
    for number, record in enumerate(records):
        total += 1
        features, lists = _features_of(record, describe(number))
        if lists is not None:
            sequences += 1
            _survey_lists(lists, lists_seen, describe(number))
        for key, feature in features.items():
            entry = seen.setdefault(key, _Seen())
            which = feature.WhichOneof("kind")
            if which is not None and entry.kind is not None and which != entry.kind:
                raise FeatureTypeError(
                    f"feature {key!r} holds {which} in {describe(number)} but {entry.kind} before",
                    key=key,
                    record=describe(number),
                )
            entry.kind = entry.kind or which
            entry.present += 1
            if which is None:
                entry.empty += 1  # no type to learn; TensorFlow reads it as zero values
                continue
            values = getattr(feature, which).value
            entry.lengths.add(len(values))
            if which == "bytes_list" and len(values) == 1 and values[0].startswith(_IMAGE_MAGIC):
                entry.images += 1
    survey = Survey(records=total)
    for key in sorted(seen):
        survey.proposals[key] = _propose(seen[key], total)
    if sequences:
        survey.feature_lists = {}
        for key in sorted(lists_seen):
            entry_list = lists_seen[key]
            proposal = _propose_list(entry_list, total)
            if key in seen:  # the dataset takes a key as one or the other, as TensorFlow does
                also = "also a context feature: keep it in one spec only"
                proposal = dataclasses.replace(proposal, note="; ".join(filter(None, [proposal.note, also])))
            survey.feature_lists[key] = proposal
            survey.steps[key] = (min(entry_list.steps), max(entry_list.steps))
    doubt = doubt_keys(sorted(seen))
    if doubt:
        survey.warnings.append(doubt)
        logger.warning("%s", doubt)
    return survey


def _propose(entry: _Seen, total: int) -> Proposal:
    if entry.kind is None:
        # Present with no list set wherever it was seen (an empty CSV cell in TFX): any VarLen
        # reads it as zero values; float32 is a placeholder, not a finding.
        return Proposal(
            "VarLen",
            "float_list",
            note=f"type unknown: no values in any of the {entry.present} records that have it; "
            "set the dtype the data will hold",
        )
    if entry.present == total and entry.images == total:
        return Proposal("Image", entry.kind)
    if entry.present == total and len(entry.lengths) == 1 and not entry.empty:
        (length,) = entry.lengths
        return Proposal("FixedLen", entry.kind, () if length == 1 else (length,))
    # Lengths vary, or the key is optional (missing = no values).
    note = f"no values in {entry.empty} of {entry.present} records that have it" if entry.empty else ""
    return Proposal("VarLen", entry.kind, note=note)


def _propose_list(entry: _SeenList, total: int) -> Proposal:
    """A feature list's spec: a FixedLenSequence when every step holds the same number of values
    (allow_missing when some records lack the list), else a VarLen (steps of any length)."""
    if entry.kind is None:
        return Proposal(
            "VarLen",
            "float_list",
            note=f"type unknown: no values in any step of the {entry.present} records that have it; "
            "set the dtype the data will hold",
        )
    if entry.empty_steps:  # a step of zero values: only a VarLen reads it
        steps = sum(entry.steps)
        return Proposal("VarLen", entry.kind, note=f"no values in {entry.empty_steps} of {steps} steps")
    if len(entry.step_lengths) == 1:
        (length,) = entry.step_lengths
        if length == 1 or (length > 1 and entry.kind != "bytes_list"):  # bytes steps hold one value
            shape = () if length == 1 else (length,)
            return Proposal("FixedLenSequence", entry.kind, shape, allow_missing=entry.present < total)
    return Proposal("VarLen", entry.kind)


def survey_paths(
    paths: PathLike | Sequence[PathLike], max_records: int = 1000, storage_options: StorageOptions = None
) -> Survey:
    """:func:`survey_records` of up to ``max_records`` records, from the first files on."""
    if max_records < 1:
        raise ValueError(f"{max_records=} must be positive")

    origins: list[tuple[str, int]] = []  # (file, record number in it), for error messages

    def records() -> Iterable[bytes]:
        for path in expand_sources(paths, storage_options):
            for number, record in enumerate(read_records(path, storage_options=storage_options)):
                origins.append((path, number))
                yield record
                if len(origins) >= max_records:
                    return

    return survey_records(records(), describe=lambda n: f"record {origins[n][1]} of {origins[n][0]!r}")
