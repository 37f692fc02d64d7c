"""The native decoder's Python side: which decoder runs, specs as columns, columns as tensors.

The compiled extension ``torch_tfrecord.support._native`` checks framing and CRCs and walks the
protobuf wire format of a whole batch in one call, filling one column per spec key (values and
row offsets) without the GIL. This module compiles a spec into the extension's column table and
turns its columns into the same tensors, :class:`Ragged` and lists as the protobuf decoder.

The protobuf decoder (:mod:`torch_tfrecord.codec.protobuf`) stays the reference: when the extension
rejects a batch (:class:`Rejected`), :mod:`torch_tfrecord.codec.decode` decodes it again with protobuf,
which raises the exact error (class, key, record and message), so both decoders fail the same way.

``TORCH_TFRECORD_DECODER`` picks the decoder: ``auto`` (default: native when built),
``native`` (an ImportError if it is not built) or ``python`` (see :mod:`torch_tfrecord.support.extension`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from ..support import extension
from ..support.extension import ENV_VAR, compiled, not_built, requested
from .assemble import (
    Column,
    byte_rows,
    byte_scalars,
    fixed_tensor,
    images,
    ragged,
    ragged_steps,
    raw_tensor,
    stack_raw,
    text_steps,
)
from .byte_column import ByteColumn, is_utf8
from .spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen, list_kind

__all__ = [
    "ENV_VAR",
    "Rejected",
    "decode_examples",
    "decode_framed",
    "decode_sequences",
    "decoder",
    "packed_bytes",
]

# The extension as a name of this module, so that tests can take it away (None: not built).
_native: ModuleType | None = compiled

# The column table's kinds and modes and decode's error codes, by the names codec/_wire.h gives
# them: the extension exports each (read from it by _code, so the numbers live in C only).
_KIND = {"bytes_list": "KIND_BYTES", "float_list": "KIND_FLOAT", "int64_list": "KIND_INT64"}
_REASONS = {
    "DECODE_MEMORY": "out of memory",
    "DECODE_PARSE": "not a valid serialized message",
    "DECODE_TYPE": "a feature holds another type of values",
    "DECODE_COUNT": "a feature holds the wrong number of values",
    "DECODE_MISSING": "a required feature is missing",
    "DECODE_FRAME": "the record framing does not match its index entry",
    "DECODE_CRC": "a CRC does not match",
}
# Set by packed_bytes(): bytes and str columns as ByteColumn instead of lists of Python objects.
_PACKED: ContextVar[bool] = ContextVar("torch_tfrecord_packed_bytes", default=False)
# FixedLen numbers that need no cast: the column's values are the tensor (fixed_tensor's result).
_NATURAL = {torch.int64: np.int64, torch.float32: np.float32}


class Rejected(Exception):
    """The native decoder found a record it cannot decode; the protobuf decoder says why.

    Attributes:
        code: what the extension found (see ``reason``).
        record: the record's position in the batch.
    """

    def __init__(self, code: int, record: int) -> None:
        self.code = code
        self.record = record
        named = (reason for name, reason in _REASONS.items() if _native is not None and _code(name) == code)
        self.reason = next(named, f"error {code}")
        super().__init__(f"record {record} of the batch: {self.reason}")


def decoder() -> Literal["native", "python"]:
    """The decoder that runs now: ``"native"`` or ``"python"`` (see ``TORCH_TFRECORD_DECODER``).

    Raises:
        ValueError: the variable holds something else.
        ImportError: ``native`` is asked for and the extension is not built.
    """
    choice = requested()
    if choice == "python":
        return "python"
    if _native is not None:
        return "native"
    if choice == "native":
        raise not_built()
    state = extension.unavailable(extension.import_error)
    hint = " (no C compiler at install time?)" if state == "is not built" else ""
    extension.warn_once(
        "native_decoder",
        f"the native decoder {state}{hint}; decoding with the protobuf runtime, several times slower",
    )
    return "python"


@contextlib.contextmanager
def packed_bytes() -> Iterator[None]:
    """Within it, the native decoder gives a VarLen bytes / str feature, or a FixedLen one of
    shape ``()`` or ``(n,)`` without a default, as a :class:`ByteColumn` (the values packed in
    one buffer, as Arrow holds them) instead of lists of ``bytes`` / ``str``: for Arrow
    consumers (:func:`torch_tfrecord.codec.arrow.plain_column` takes either). The protobuf
    decoder, and str values that are not all UTF-8 (to raise naming the record), still give lists.
    """
    token = _PACKED.set(True)
    try:
        yield
    finally:
        _PACKED.reset(token)


def _packable(spec: FeatureSpec) -> bool:
    if type(spec) is VarLen:
        return True
    return type(spec) is FixedLen and spec.default is None and len(spec.shape) <= 1


def _code(name: str) -> int:
    """The extension's constant ``name`` (a kind, mode or error code of codec/_wire.h)."""
    assert _native is not None
    return int(getattr(_native, name))


def _default_bytes(spec: FixedLen) -> bytes | None:
    values = spec.default_values()
    if values is None or spec.dtype in (bytes, str):
        return None
    if list_kind(spec.dtype) == "int64_list":
        return np.array([int(v) for v in values], dtype="<i8").tobytes()
    return np.array(values, dtype="<f4").tobytes()


def _column(key: str, spec: FeatureSpec, sequence: bool) -> tuple[Any, ...]:
    """The extension's column: (key, kind, mode, numel, required, sequence, default)."""
    name = key.encode()
    one, fixed, multiple, var = (_code(f"MODE_{mode}") for mode in ("ONE", "FIXED", "MULT", "VAR"))
    if isinstance(spec, Image | RawTensor):  # one bytes value, decoded per record in Python
        return (name, _code("KIND_BYTES"), one, 1, 1, 0, None)
    kind = _code(_KIND[list_kind(spec.dtype)])
    if sequence:  # a feature list: steps of numel values (FixedLenSequence) or of any length
        if isinstance(spec, FixedLenSequence):
            return (name, kind, fixed, math.prod(spec.shape), int(not spec.allow_missing), 1, None)
        return (name, kind, var, 0, 0, 1, None)
    if isinstance(spec, FixedLen):
        numel = math.prod(spec.shape)
        if kind == _code("KIND_BYTES") and spec.default is not None:  # a bytes default is filled in below
            return (name, kind, var, numel, 0, 0, None)
        return (name, kind, fixed, numel, 0, 0, _default_bytes(spec))
    if isinstance(spec, FixedLenSequence):
        required = not spec.allow_missing and spec.default is None
        return (name, kind, multiple, math.prod(spec.shape), int(required), 0, None)
    return (name, kind, var, 0, 0, 0, None)


@functools.lru_cache(maxsize=64)
def _columns(
    context: tuple[tuple[str, FeatureSpec], ...], sequence: tuple[tuple[str, FeatureSpec], ...]
) -> tuple[tuple[Any, ...], ...] | None:
    """The column table of a spec, or None when the native decoder does not take it."""
    for _, spec in context:
        if isinstance(spec, RawTensor) and not all(isinstance(d, int) for d in spec.shape):
            return None  # dimensions named by other features: the protobuf decoder
    return tuple(_column(k, s, False) for k, s in context) + tuple(_column(k, s, True) for k, s in sequence)


def _run(
    buffer: Any,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    table: tuple[tuple[Any, ...], ...],
    *,
    framed: bool = False,
    verify_crc: bool = True,
    sequence: bool = False,
) -> list[tuple[bytes, Any, Any, Any]]:
    assert _native is not None
    result = _native.decode(
        buffer, starts, lengths, table, framed=framed, verify_crc=verify_crc, sequence=sequence
    )
    if isinstance(result, tuple):
        raise Rejected(result[0], result[1])
    return result  # type: ignore[no-any-return]


class _Assembler:
    """Turns the extension's columns into the output types, through :mod:`.assemble` as the
    protobuf backend does, so both give the same values and errors."""

    def __init__(self, buffer: Any, n: int, locations: Sequence[str] | None) -> None:
        self.buffer = buffer
        self.n = n
        self.locations = locations

    def numbers(self, values: Any, dtype: Any) -> npt.NDArray[Any]:
        return np.frombuffer(values, dtype=np.int64 if list_kind(dtype) == "int64_list" else np.float32)

    def byte_values(self, values: Any, rows_buffer: Any, scalar: bool = False) -> list[Any]:
        """Per record its bytes values; with ``scalar`` its only value (the extension checked)."""
        assert _native is not None
        return _native.bytes_rows(self.buffer, values, rows_buffer, scalar)  # type: ignore[no-any-return]

    def packed(self, spec: FixedLen | VarLen, values: Any, rows_buffer: Any) -> ByteColumn | None:
        """The values packed (the extension checked a FixedLen's counts); None for str values
        that are not all UTF-8 (the lists' path raises naming the record)."""
        assert _native is not None
        offsets, data = _native.bytes_pack(self.buffer, values)
        offsets = np.frombuffer(offsets, dtype=np.int64)
        text = spec.dtype is str
        if text and not is_utf8(data, offsets):
            return None
        return ByteColumn(data, offsets, np.frombuffer(rows_buffer, dtype=np.int64), text)

    def singles(self, values: Any) -> list[memoryview]:
        """Each record's only value (RawTensor, Image), as a view of the buffer."""
        spans = np.frombuffer(values, dtype=np.int64).reshape(-1, 2).tolist()
        view = memoryview(self.buffer)
        return [view[start : start + length] for start, length in spans]

    def feature(self, key: str, spec: FeatureSpec, column: tuple[bytes, Any, Any, Any]) -> Any:
        status, rows_buffer, values, _ = column
        if type(spec) is FixedLen and spec.dtype in _NATURAL:
            # The column's own type and exact size (the extension checked): the tensor is its memory.
            flat = np.frombuffer(values, dtype=_NATURAL[spec.dtype])
            return torch.from_numpy(flat).view(self.n, *spec.shape)
        where = Column(key, spec, self.locations)
        if isinstance(spec, Image):
            return images(where, spec, lambda: [bytes(data) for data in self.singles(values)])
        if isinstance(spec, RawTensor):
            dims = [int(d) for d in spec.shape]  # static or -1: named dimensions never come here
            singles = self.singles(values)
            tensors = [raw_tensor(where, spec, i, singles[i], list(dims)) for i in range(self.n)]
            return stack_raw(spec, tensors)
        kind = list_kind(spec.dtype)
        if kind == "bytes_list" and _PACKED.get() and isinstance(spec, FixedLen | VarLen) and _packable(spec):
            packed = self.packed(spec, values, rows_buffer)
            if packed is not None:
                return packed
        if isinstance(spec, FixedLen):
            if kind == "bytes_list":
                return self.fixed_bytes(where, spec, status, rows_buffer, values)
            return fixed_tensor(where, spec, self.numbers(values, spec.dtype), self.n)
        if kind == "bytes_list":
            return byte_rows(where, self.byte_values(values, rows_buffer), scalar=False)
        inner = spec.shape if isinstance(spec, FixedLenSequence) else ()
        rows = np.frombuffer(rows_buffer, dtype=np.int64)
        return ragged(where, self.numbers(values, spec.dtype), rows, spec.dtype, inner)

    def fixed_bytes(
        self, where: Column, spec: FixedLen, status: bytes, rows_buffer: Any, values: Any
    ) -> list[Any]:
        scalar = spec.shape == ()
        if spec.default is None:  # the extension checked every count
            if scalar:
                return byte_scalars(where, self.byte_values(values, rows_buffer, scalar=True))
            return byte_rows(where, self.byte_values(values, rows_buffer))
        listed = self.byte_values(values, rows_buffer)
        numel = math.prod(spec.shape)
        counts = np.diff(np.frombuffer(rows_buffer, dtype=np.int64))
        present = np.frombuffer(status, dtype=np.uint8).astype(bool)
        if (counts[present] != numel).any():
            raise Rejected(_code("DECODE_COUNT"), int(np.flatnonzero(present & (counts != numel))[0]))
        default = list(spec.default_values() or ())
        # (a list of its own in each row, as protobuf's decoder gives: rows are mutable)
        rows = [row if present[i] else default.copy() for i, row in enumerate(listed)]
        return byte_rows(where, rows, scalar)

    def sequence(self, key: str, spec: FixedLenSequence | VarLen, column: tuple[bytes, Any, Any, Any]) -> Any:
        """A feature list: per record its steps (rows count steps; steps end at value offsets)."""
        _, rows_buffer, values, steps_buffer = column
        where = Column(key, spec, self.locations)
        rows = np.frombuffer(rows_buffer, dtype=np.int64)
        ends = np.concatenate([[0], np.frombuffer(steps_buffer, dtype=np.int64)])
        if list_kind(spec.dtype) == "bytes_list":
            steps = self.byte_values(values, ends)
            bounds = zip(rows[:-1].tolist(), rows[1:].tolist())
            per_record = text_steps(where, [steps[a:b] for a, b in bounds])
            if isinstance(spec, FixedLenSequence):  # shape (): each step holds one value
                return [[step[0] for step in record] for record in per_record]
            return per_record
        flat = self.numbers(values, spec.dtype)
        if isinstance(spec, FixedLenSequence):
            return ragged(where, flat, ends[rows], spec.dtype, spec.shape)
        return ragged_steps(where, flat, ends, rows, spec.dtype)


def _joined(records: Sequence[Any]) -> tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
    starts = np.zeros(len(records), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return b"".join(records), starts, lengths


def _decode_columns(
    spec: Mapping[str, FeatureSpec], columns: list[Any], buffer: Any, n: int, locations: Sequence[str] | None
) -> dict[str, Any]:
    assembler = _Assembler(buffer, n, locations)
    return {key: assembler.feature(key, s, column) for (key, s), column in zip(spec.items(), columns)}


def decode_examples(
    records: Sequence[Any], spec: Mapping[str, FeatureSpec], locations: Sequence[str] | None
) -> dict[str, Any] | None:
    """:func:`torch_tfrecord.decode_batch` natively; None when the extension does not take ``spec``.

    Raises:
        Rejected: a record the extension cannot decode.
    """
    table = _columns(tuple(spec.items()), ())
    if table is None:
        return None
    buffer, starts, lengths = _joined(records)
    columns = _run(buffer, starts, lengths, table)
    return _decode_columns(spec, columns, buffer, len(records), locations)


def decode_framed(
    buffer: Any,
    starts: npt.NDArray[np.int64],
    framed_sizes: npt.NDArray[np.int64],
    spec: Mapping[str, FeatureSpec],
    *,
    verify_crc: bool,
) -> dict[str, Any] | None:
    """Decodes framed records (``u64 length | u32 crc | data | u32 crc``) lying in ``buffer``.

    Each record ``i`` is the ``framed_sizes[i]`` bytes at ``starts[i]``; its length field must
    agree with that size, and with ``verify_crc`` both CRCs must match.

    Returns:
        The columns, or None when the extension does not take ``spec``.

    Raises:
        Rejected: a record is damaged or cannot be decoded.
    """
    table = _columns(tuple(spec.items()), ())
    if table is None:
        return None
    columns = _run(buffer, starts, framed_sizes, table, framed=True, verify_crc=verify_crc)
    return _decode_columns(spec, columns, buffer, len(starts), None)


def decode_sequences(
    records: Sequence[Any],
    context_spec: Mapping[str, FeatureSpec],
    sequence_spec: Mapping[str, FixedLenSequence | VarLen],
    locations: Sequence[str] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]] | None:
    """The columns of SequenceExamples as the protobuf decoder gives them (before padding)."""
    table = _columns(tuple(context_spec.items()), tuple(sequence_spec.items()))
    if table is None:
        return None
    buffer, starts, lengths = _joined(records)
    columns = _run(buffer, starts, lengths, table, sequence=True)
    n = len(records)
    context = _decode_columns(context_spec, columns[: len(context_spec)], buffer, n, locations)
    assembler = _Assembler(buffer, n, locations)
    sequences: dict[str, Any] = {}
    step_counts: dict[str, torch.Tensor] = {}
    for (key, spec), column in zip(sequence_spec.items(), columns[len(context_spec) :]):
        sequences[key] = assembler.sequence(key, spec, column)
        step_counts[key] = torch.from_numpy(np.diff(np.frombuffer(column[1], dtype=np.int64)))
    return context, sequences, step_counts
