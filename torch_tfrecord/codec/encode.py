"""Encoding Python values, numpy arrays and tensors into serialized Examples / SequenceExamples.

Types map without guessing: ints and bools -> int64_list, floats -> float_list, bytes and str
-> bytes_list. A uint8 array (usually an image) is refused unless wrapped, because both
"a list of small ints" and "raw bytes" are plausible and the wrong guess is silent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..proto import Example, SequenceExample

__all__ = [
    "BytesList",
    "FloatList",
    "Int64List",
    "encode_example",
    "encode_sequence_example",
]


@dataclasses.dataclass(frozen=True, init=False)
class Int64List:
    """Values to store as an int64_list, whatever their Python type (e.g. a uint8 tensor)."""

    values: tuple[int, ...]

    def __init__(self, values: Iterable[Any]) -> None:
        object.__setattr__(self, "values", tuple(int(v) for v in _flat(values)))


@dataclasses.dataclass(frozen=True, init=False)
class FloatList:
    """Values to store as a float_list (float32 on the wire)."""

    values: tuple[float, ...]

    def __init__(self, values: Iterable[Any]) -> None:
        object.__setattr__(self, "values", tuple(float(v) for v in _flat(values)))


@dataclasses.dataclass(frozen=True, init=False)
class BytesList:
    """Values to store as a bytes_list; str is encoded as UTF-8."""

    values: tuple[bytes, ...]

    def __init__(self, values: Iterable[bytes | str] | bytes | str) -> None:
        items = [values] if isinstance(values, bytes | str) else list(values)
        encoded = []
        for item in items:
            if isinstance(item, str):
                encoded.append(item.encode("utf-8"))
            elif isinstance(item, bytes | bytearray | memoryview):
                encoded.append(bytes(item))
            else:
                raise TypeError(f"BytesList holds bytes or str, got {type(item).__name__}")
        object.__setattr__(self, "values", tuple(encoded))


def _flat(values: Any) -> list[Any]:
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).tolist()  # type: ignore[no-any-return]
    if isinstance(values, np.ndarray):
        return values.reshape(-1).tolist()  # type: ignore[no-any-return]
    if isinstance(values, int | float):
        return [values]
    return list(values)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _fill(key: str, value: Any, feature: Any) -> None:
    """Sets ``feature`` (a Feature message) from a Python value; TypeError / ValueError name ``key``."""
    if isinstance(value, Int64List):
        _fill_ints(key, value.values, feature)
    elif isinstance(value, FloatList):
        feature.float_list.value.extend(value.values)
    elif isinstance(value, BytesList):
        feature.bytes_list.value.extend(value.values)
    elif isinstance(value, bool | int | np.integer | np.bool_):
        _fill_ints(key, [int(value)], feature)
    elif isinstance(value, float | np.floating):
        feature.float_list.value.append(float(value))
    elif isinstance(value, str):
        feature.bytes_list.value.append(value.encode("utf-8"))
    elif isinstance(value, bytes | bytearray | memoryview):
        feature.bytes_list.value.append(bytes(value))
    elif isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        _fill_array(
            key, (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy(), feature, "tensor"
        )
    elif isinstance(value, np.ndarray):
        _fill_array(key, value, feature, "array")
    elif isinstance(value, Sequence):
        _fill_sequence(key, value, feature)
    else:
        raise TypeError(
            f"feature {key!r}: cannot encode {type(value).__name__}; use int, float, str, bytes, a list of "
            "one of those, a numpy array, a tensor, or tt.Int64List / FloatList / BytesList"
        )


def _fill_ints(key: str, values: Sequence[int], feature: Any) -> None:
    for v in values:
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"feature {key!r}: {v} does not fit int64")
    feature.int64_list.value.extend(values)


def _fill_array(key: str, array: np.ndarray[Any, Any], feature: Any, what: str) -> None:
    if array.dtype == np.uint8:
        raise TypeError(
            f"feature {key!r}: a uint8 {what} is ambiguous (an image? small ints?): wrap it as "
            "tt.BytesList([encoded_image_bytes]), tt.BytesList([array.tobytes()]) for tt.RawTensor, "
            "or tt.Int64List(array)"
        )
    if array.dtype.kind in "iub":
        # against a uint64: numpy 1.x compares a uint64 with a Python int as float64 (2**63 == 2**63 - 1)
        if array.dtype == np.uint64 and array.size and array.max() > np.uint64(_INT64_MAX):
            raise ValueError(f"feature {key!r}: a uint64 value exceeds int64")
        feature.int64_list.value.extend(array.astype(np.int64).reshape(-1).tolist())
    elif array.dtype.kind == "f":
        feature.float_list.value.extend(array.astype(np.float32).reshape(-1).tolist())
    elif array.dtype.kind in "SUO":
        _fill_sequence(key, array.reshape(-1).tolist(), feature)
    else:
        raise TypeError(f"feature {key!r}: cannot encode a {what} of dtype {array.dtype}")


def _fill_sequence(key: str, values: Sequence[Any], feature: Any) -> None:
    if len(values) == 0:
        return  # a Feature with no list set: TensorFlow reads it as zero values of any type
    if all(isinstance(v, bytes | bytearray | memoryview | str) for v in values):
        feature.bytes_list.value.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values)
        return
    if any(isinstance(v, bytes | bytearray | memoryview | str) for v in values):
        raise TypeError(f"feature {key!r}: a list mixes text/bytes with numbers")
    array = np.asarray(values)
    if array.dtype.kind not in "iubf":
        raise TypeError(f"feature {key!r}: cannot encode a list of {array.dtype} values (ints beyond int64?)")
    _fill_array(key, array, feature, "list")


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serializes a dict of features as a ``tf.train.Example``.

    Args:
        features: key -> int / float / bool / str / bytes, a list of one kind of those, a numpy
            array, a tensor, or an explicit :class:`Int64List` / :class:`FloatList` /
            :class:`BytesList`. An array or tensor of two or more dimensions is stored
            flattened in row-major order, its shape not stored (a Feature is a flat list):
            give the shape back in the spec, e.g. ``FixedLen((2, 3), torch.float32)``.

    Returns:
        The serialized Example.

    Raises:
        TypeError, ValueError: a value that cannot be encoded without guessing, naming its key.

    Example:
        >>> encode_example({"label": 3, "text": "cat", "score": [0.5, 1.0]})  # doctest: +SKIP
    """
    example = Example()
    _fill_features(features, example.features.feature)
    return example.SerializeToString(deterministic=True)  # type: ignore[no-any-return]


def _fill_features(features: Mapping[str, Any], target: Any) -> None:
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a mapping of key to values, got {type(features).__name__}")
    for key, value in features.items():
        if not isinstance(key, str):
            raise TypeError(f"feature keys are str, got {key!r}")
        _fill(key, value, target[key])


def encode_sequence_example(
    context: Mapping[str, Any] | None, feature_lists: Mapping[str, Sequence[Any]]
) -> bytes:
    """Serializes a ``tf.train.SequenceExample``.

    Args:
        context: per-sequence features, as for :func:`encode_example`.
        feature_lists: key -> a sequence of steps, each step a value as for
            :func:`encode_example` (a 2-D array or tensor is a sequence of its rows).

    Returns:
        The serialized SequenceExample.
    """
    message = SequenceExample()
    _fill_features(context or {}, message.context.feature)
    for key, steps in feature_lists.items():
        if not isinstance(key, str):
            raise TypeError(f"feature list keys are str, got {key!r}")
        target = message.feature_lists.feature_list[key]
        for step in steps:
            _fill(key, step, target.feature.add())
    return message.SerializeToString(deterministic=True)  # type: ignore[no-any-return]
