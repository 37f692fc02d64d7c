"""Numeric feature values from protobuf list messages, through their packed bytes when long.

A Python object per value is what reading ``Int64List.value`` costs; for long lists it is
cheaper to re-serialize the message and read the packed payload with NumPy in one go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PACKED_MIN_AVERAGE", "numeric_values"]

_NUMPY_OF_KIND = {"int64_list": np.int64, "float_list": np.float32}

# Lists at least this long on average go through their packed bytes: below it, a Python object
# per value is cheaper than a serialization call per record.
PACKED_MIN_AVERAGE = 48


def _packed_payload(serialized: bytes, count: int, kind: str) -> memoryview | None:
    """The packed values inside a re-serialized FloatList / Int64List, or None if not that shape.

    upb writes repeated scalars packed (proto3): one field-1 record whose payload is the raw
    little-endian float32s or the varints, so NumPy can take them without a Python object per
    value. Anything else (unknown fields kept from the input) returns None: the slow path.
    """
    if not serialized:
        return memoryview(b"") if count == 0 else None
    if serialized[0] != 0x0A:
        return None
    length = 0
    shift = 0
    position = 1
    while position < len(serialized) and position <= 10:
        byte = serialized[position]
        length |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            break
        shift += 7
    if position + length != len(serialized) or (kind == "float_list" and length != 4 * count):
        return None
    return memoryview(serialized)[position:]


def _decode_varints(data: bytes | bytearray, count: int) -> np.ndarray[Any, Any] | None:
    """Vectorised decode of ``count`` concatenated varints as int64, or None if they are not that."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) != count or (len(raw) and ends[-1] != len(raw) - 1):
        return None
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        return None
    position = np.arange(len(raw), dtype=np.int64) - np.repeat(starts, lengths)
    parts = (raw & 0x7F).astype(np.uint64) << (position.astype(np.uint64) * np.uint64(7))
    return np.add.reduceat(parts, starts).view(np.int64)


def numeric_values(present: Sequence[Any], kind: str, total: int, messages: bool) -> np.ndarray[Any, Any]:
    """All values of ``present`` (list messages with ``messages``, else value sequences),
    concatenated, as int64 / float32; ``total`` is how many there are."""
    dtype = _NUMPY_OF_KIND[kind]
    if messages:
        payloads = []
        for message in present:
            payload = _packed_payload(message.SerializeToString(), len(message.value), kind)
            if payload is None:
                break
            payloads.append(payload)
        else:
            joined = bytearray().join(payloads)  # writable: the tensor can own it without a copy
            if kind == "float_list":
                return np.frombuffer(joined, dtype="<f4", count=total).astype(np.float32, copy=False)
            decoded = _decode_varints(joined, total)
            if decoded is not None:
                return decoded
        present = [message.value for message in present]
    flat: list[Any] = []
    extend = flat.extend
    for values in present:
        extend(values)
    return np.array(flat, dtype=dtype) if flat else np.zeros(0, dtype=dtype)
