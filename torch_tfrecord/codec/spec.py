"""Feature specs: what a feature of an Example holds and how it becomes a tensor.

Specs are frozen dataclasses that reject nonsense when they are made, not at record 1,000,000.
Their ``repr`` is valid Python (after ``import torch, torch_tfrecord as tt``), so a spec that
:func:`torch_tfrecord.infer_spec` proposes can be pasted into code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import numpy as np
import torch

from ..errors import SpecError
from .image_spec import Image

__all__ = [
    "UNSIGNED_DTYPES",
    "DType",
    "FeatureSpec",
    "FixedLen",
    "FixedLenSequence",
    "Image",
    "RawTensor",
    "VarLen",
    "list_kind",
    "normalize_spec",
]

DType: TypeAlias = "torch.dtype | type[bytes] | type[str]"
ListKind = Literal["int64_list", "float_list", "bytes_list"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# torch's unsigned types wider than 8 bits (from torch 2.3; left out where torch lacks them)
UNSIGNED_DTYPES: tuple[torch.dtype, ...] = tuple(
    getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)
)
_RAW_DTYPES = (*_INT_DTYPES, *_FLOAT_DTYPES, *UNSIGNED_DTYPES)

_SHORTHANDS: dict[str, Any] = {}


def list_kind(dtype: Any) -> ListKind:
    """The Feature list that holds values of ``dtype``: int64_list, float_list or bytes_list."""
    if dtype is bytes or dtype is str:
        return "bytes_list"
    if dtype in _INT_DTYPES:
        return "int64_list"
    if dtype in _FLOAT_DTYPES:
        return "float_list"
    raise SpecError(
        f"dtype {dtype!r} is not supported: use torch.int64 / int32 / int16 / int8 / uint8 / bool, "
        "torch.float32 / float64 / float16 / bfloat16, bytes or str"
    )


def _dtype_repr(dtype: Any) -> str:
    if dtype is bytes:
        return "bytes"
    if dtype is str:
        return "str"
    return repr(dtype)  # torch.float32


def _shape(shape: Any, name: str) -> tuple[int, ...]:
    if not isinstance(shape, int | tuple | list):
        raise SpecError(f"{name} must be a tuple of non-negative ints, got {shape!r}")
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    for dim in dims:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise SpecError(f"{name} must be a tuple of non-negative ints, got {shape!r}")
    return dims


_MAX_VALUES = (1 << 31) - 1  # a serialized Example is under 2 GiB: no feature holds more values
# A default is filled in whole for every record that lacks the feature: at most this many values
# (128 MiB of float64), so that a spec (from a spec.json, say) cannot make a decoder allocate 8 GB.
_MAX_DEFAULT_VALUES = 1 << 24


def _numel(shape: tuple[int, ...], name: str) -> int:
    numel = math.prod(shape)
    if numel > _MAX_VALUES:
        raise SpecError(
            f"{name} {shape} holds {numel} values: no record can (a serialized Example is under 2 GiB)"
        )
    _check_extent(shape, name)
    return numel


def _check_extent(dims: tuple[int | str, ...], name: str) -> None:
    """The fixed dimensions other than 0 (and -1) multiply to at most 2**31 - 1: they are the
    strides of the tensor even when a 0 leaves it empty, and torch cannot lay out more."""
    extent = math.prod(d for d in dims if isinstance(d, int) and d > 0)
    if extent > _MAX_VALUES:
        raise SpecError(
            f"{name} {dims}: its dimensions other than 0 multiply to {extent}, more than "
            f"{_MAX_VALUES} (the strides of such a tensor overflow, even an empty one)"
        )


def _default(default: Any, dtype: Any, shape: tuple[int, ...], name: str) -> Any:
    """Validates a default value and stores it flat and hashable (a tuple), or None.

    A default whose values are all equal is stored as that one value (filled in when used), so
    ``default=0`` and ``default=[0, 0]`` give equal specs and a large shape costs nothing here.
    """
    if default is None:
        return None
    numel = _numel(shape, name + " shape")
    if numel > _MAX_DEFAULT_VALUES:
        raise SpecError(
            f"{name} shape {shape} with a default fills {numel} values into every record that lacks it; "
            f"a default fills at most {_MAX_DEFAULT_VALUES} (leave the default out, or use a smaller shape)"
        )
    if dtype is bytes or dtype is str:
        values = [default] if isinstance(default, bytes | str) else default
        if not isinstance(values, list | tuple) or any(not isinstance(v, dtype) for v in values):
            raise SpecError(f"{name} default {default!r} must hold {_dtype_repr(dtype)} values")
    else:
        values = [_number(v, dtype, f"{name} default {default!r}") for v in _flat(default, name)]
    if len(values) not in (1, numel):
        raise SpecError(f"{name} default has {len(values)} values, shape {shape} needs {numel}")
    if len(values) > 1 and all(_same_value(v, values[0]) for v in values):
        values = values[:1]
    return tuple(values)


def _flat(default: Any, name: str) -> list[Any]:
    """A scalar or (nested) list / tuple / array of numbers, flattened; ragged nesting is an error."""
    try:
        array = np.asarray(default, dtype=object)
    except ValueError as error:  # ragged nesting
        raise SpecError(
            f"{name} default {default!r} is not a scalar or a regular nested list: {error}"
        ) from None
    return list(array.reshape(-1))


def _number(value: Any, dtype: Any, what: str) -> int | float:
    """One default value as the Python number the dtype stores, checked to fit it."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, int | float):
        raise SpecError(f"{what} is not numeric: {value!r}")
    if dtype in _FLOAT_DTYPES:
        number = float(value)
        # Specs that compare equal must decode alike (caches are keyed by them): one NaN object,
        # and -0.0 (== 0.0) stored as 0.0.
        return math.nan if math.isnan(number) else number + 0.0
    if isinstance(value, float) and not value.is_integer():
        raise SpecError(f"{what}: {value!r} is not an integer, as {_dtype_repr(dtype)} needs")
    number = int(value)
    info = (0, 1) if dtype is torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    if not info[0] <= number <= info[1]:
        raise SpecError(f"{what}: {number} does not fit {_dtype_repr(dtype)} ({info[0]}..{info[1]})")
    return number


def _values_repr(values: tuple[Any, ...]) -> str:
    """A default as Python to paste: one value alone, several as a list; NaN and inf spelled out."""
    parts = [
        f"float({str(v)!r})" if isinstance(v, float) and not math.isfinite(v) else repr(v) for v in values
    ]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def _same_value(a: Any, b: Any) -> bool:
    # Float defaults are canonical (one NaN object, no -0.0), so identity settles NaN.
    return bool(type(a) is type(b) and (a is b or a == b))


@dataclasses.dataclass(frozen=True)
class FixedLen:
    """A feature with a fixed number of values, decoded to a tensor of ``shape``.

    Args:
        shape: the shape of one record's value; ``()`` for a scalar.
        dtype: torch.int64 / int32 / int16 / int8 / uint8 / bool (from an int64_list),
            torch.float32 / float64 / float16 / bfloat16 (from a float_list), or ``bytes`` /
            ``str`` (from a bytes_list; shape ``()`` or ``(n,)``). Values that do not fit the
            dtype are an error, never silently wrapped.
        default: used when the key is missing (a scalar fills the shape); without it a
            missing key is an error.

    Example:
        >>> FixedLen((), torch.int64)
        tt.FixedLen(shape=(), dtype=torch.int64)
    """

    shape: tuple[int, ...]
    dtype: Any
    default: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLen shape"))
        _numel(self.shape, "FixedLen shape")
        list_kind(self.dtype)
        if self.dtype in (bytes, str) and len(self.shape) > 1:
            raise SpecError(f"FixedLen of {_dtype_repr(self.dtype)} takes shape () or (n,), got {self.shape}")
        object.__setattr__(self, "default", _default(self.default, self.dtype, self.shape, "FixedLen"))

    def default_values(self) -> tuple[Any, ...] | None:
        """The default as one flat value per element of ``shape`` (None without a default)."""
        if self.default is None:
            return None
        values: tuple[Any, ...] = self.default
        return values * math.prod(self.shape) if len(values) == 1 else values

    def __repr__(self) -> str:
        default = "" if self.default is None else f", default={_values_repr(self.default)}"
        return f"tt.FixedLen(shape={self.shape!r}, dtype={_dtype_repr(self.dtype)}{default})"


@dataclasses.dataclass(frozen=True)
class VarLen:
    """A feature with any number of values (zero included).

    Decoded per record to a 1-D tensor (or a list of bytes / str); in a batch, numeric values
    become a :class:`torch_tfrecord.Ragged`. A missing key gives zero values.

    Args:
        dtype: as for :class:`FixedLen`.
    """

    dtype: Any

    def __post_init__(self) -> None:
        list_kind(self.dtype)

    def __repr__(self) -> str:
        return f"tt.VarLen(dtype={_dtype_repr(self.dtype)})"


@dataclasses.dataclass(frozen=True)
class FixedLenSequence:
    """A sequence of fixed-shape steps.

    In a SequenceExample it names a feature list: one Feature per step, each with
    ``prod(shape)`` values, decoded to ``[steps, *shape]``. In an Example it has TensorFlow's
    meaning: a flat list reshaped to ``[-1, *shape]``.

    Args:
        shape: the shape of one step.
        dtype: numeric dtype as for :class:`FixedLen`, or ``bytes`` / ``str`` with shape ().
        allow_missing: a missing feature list is an empty sequence rather than an error.
        default: accepted for symmetry with TensorFlow; a missing list with ``allow_missing``
            is empty, and in a batch, padding uses this value (0 when None).
    """

    shape: tuple[int, ...]
    dtype: Any
    allow_missing: bool = False
    default: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLenSequence shape"))
        if _numel(self.shape, "FixedLenSequence shape") == 0:
            raise SpecError(
                f"FixedLenSequence shape {self.shape} holds no values: the number of steps of a "
                "list of zero-value steps cannot be told"
            )
        list_kind(self.dtype)
        if self.dtype in (bytes, str) and self.shape != ():
            raise SpecError(f"FixedLenSequence of {_dtype_repr(self.dtype)} takes shape (), got {self.shape}")
        if self.default is not None and self.dtype in (bytes, str):
            raise SpecError("FixedLenSequence of bytes / str takes no default")
        object.__setattr__(self, "default", _default(self.default, self.dtype, (), "FixedLenSequence"))

    def __repr__(self) -> str:
        extra = ", allow_missing=True" if self.allow_missing else ""
        if self.default is not None:
            extra += f", default={_values_repr(self.default)}"
        return f"tt.FixedLenSequence(shape={self.shape!r}, dtype={_dtype_repr(self.dtype)}{extra})"


@dataclasses.dataclass(frozen=True)
class RawTensor:
    """A bytes feature holding the raw bytes of an array (the ``ndarray.tostring()`` pattern).

    Args:
        dtype: element type of the bytes, e.g. torch.uint8 or torch.float32 (little-endian).
        shape: the array's shape; a dimension may be ``-1`` (once) or the name of an int64
            scalar feature of the same record, e.g. ``("height", "width", 3)``.
    """

    dtype: torch.dtype
    shape: tuple[int | str, ...]

    def __post_init__(self) -> None:
        if self.dtype not in _RAW_DTYPES:
            raise SpecError(f"RawTensor dtype {self.dtype!r} must be a numeric torch dtype")
        if not isinstance(self.shape, int | str | tuple | list):
            raise SpecError(f"RawTensor shape entries are ints >= -1 or feature names, got {self.shape!r}")
        dims = (self.shape,) if isinstance(self.shape, int | str) else tuple(self.shape)
        for dim in dims:
            valid_int = isinstance(dim, int) and not isinstance(dim, bool) and dim >= -1
            if not (valid_int or (isinstance(dim, str) and dim)):
                raise SpecError(
                    f"RawTensor shape entries are ints >= -1 or feature names, got {self.shape!r}"
                )
        if sum(1 for d in dims if d == -1) > 1:
            raise SpecError(f"RawTensor shape may hold -1 once, got {self.shape!r}")
        _check_extent(dims, "RawTensor shape")
        object.__setattr__(self, "shape", dims)

    @property
    def is_static(self) -> bool:
        """True when the shape names no feature and has no -1: every record has this shape."""
        return all(isinstance(d, int) and d >= 0 for d in self.shape)

    def __repr__(self) -> str:
        return f"tt.RawTensor(dtype={self.dtype!r}, shape={self.shape!r})"


FeatureSpec: TypeAlias = "FixedLen | VarLen | FixedLenSequence | RawTensor | Image"

_SHORTHANDS.update(
    {
        "int": VarLen(torch.int64),
        "int64": VarLen(torch.int64),
        "float": VarLen(torch.float32),
        "float32": VarLen(torch.float32),
        "bytes": VarLen(bytes),
        "byte": VarLen(bytes),  # the word of the `tfrecord` package
        "str": VarLen(str),
    }
)


def normalize_spec(spec: Mapping[str, Any] | None) -> dict[str, FeatureSpec] | None:
    """Turns a spec with shorthands (``{"label": "int"}``) into spec objects.

    Shorthands: ``"int"`` / ``"int64"``, ``"float"`` / ``"float32"``, ``"bytes"`` / ``"byte"``,
    ``"str"``: each a :class:`VarLen` of that type.

    Raises:
        SpecError: an unknown shorthand or a value that is no spec, naming the key.
    """
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise SpecError(f"spec must be a mapping of feature key to spec, got {type(spec).__name__}")
    normalized: dict[str, FeatureSpec] = {}
    for key, value in spec.items():
        if not isinstance(key, str):
            raise SpecError(f"feature keys are str, got {key!r}")
        if isinstance(value, str):
            if value not in _SHORTHANDS:
                raise SpecError(
                    f"feature {key!r}: unknown shorthand {value!r}; use one of {sorted(_SHORTHANDS)}"
                )
            normalized[key] = _SHORTHANDS[value]
        elif isinstance(value, FixedLen | VarLen | FixedLenSequence | RawTensor | Image):
            normalized[key] = value
        else:
            raise SpecError(f"feature {key!r}: {value!r} is not a feature spec or shorthand")
    return normalized
