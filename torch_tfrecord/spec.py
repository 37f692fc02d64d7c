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

import torch

__all__ = [
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
_RAW_DTYPES = (*_INT_DTYPES, *_FLOAT_DTYPES, torch.uint16, torch.uint32, torch.uint64)

_SHORTHANDS: dict[str, Any] = {}


def list_kind(dtype: Any) -> ListKind:
    """The Feature list that holds values of ``dtype``: int64_list, float_list or bytes_list."""
    if dtype is bytes or dtype is str:
        return "bytes_list"
    if dtype in _INT_DTYPES:
        return "int64_list"
    if dtype in _FLOAT_DTYPES:
        return "float_list"
    raise ValueError(
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
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    for dim in dims:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise ValueError(f"{name} must be a tuple of non-negative ints, got {shape!r}")
    return dims


def _default(default: Any, dtype: Any, shape: tuple[int, ...], name: str) -> Any:
    """Validates a default value and stores it flat and hashable (a tuple), or None."""
    if default is None:
        return None
    numel = math.prod(shape)
    if dtype is bytes or dtype is str:
        values = [default] if isinstance(default, bytes | str) else list(default)
        if any(not isinstance(v, dtype) for v in values):
            raise ValueError(f"{name} default {default!r} must hold {_dtype_repr(dtype)} values")
    else:
        try:
            values = torch.as_tensor(default, dtype=torch.float64).reshape(-1).tolist()
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"{name} default {default!r} is not numeric: {error}") from None
    if len(values) == 1 and numel != 1:
        values = values * numel
    if len(values) != numel:
        raise ValueError(f"{name} default has {len(values)} values, shape {shape} needs {numel}")
    return tuple(values)


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
        list_kind(self.dtype)
        if self.dtype in (bytes, str) and len(self.shape) > 1:
            raise ValueError(
                f"FixedLen of {_dtype_repr(self.dtype)} takes shape () or (n,), got {self.shape}"
            )
        object.__setattr__(self, "default", _default(self.default, self.dtype, self.shape, "FixedLen"))

    def __repr__(self) -> str:
        default = "" if self.default is None else f", default={list(self.default)!r}"
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
        list_kind(self.dtype)
        if self.dtype in (bytes, str) and self.shape != ():
            raise ValueError(
                f"FixedLenSequence of {_dtype_repr(self.dtype)} takes shape (), got {self.shape}"
            )
        if self.default is not None and self.dtype in (bytes, str):
            raise ValueError("FixedLenSequence of bytes / str takes no default")
        object.__setattr__(self, "default", _default(self.default, self.dtype, (), "FixedLenSequence"))

    def __repr__(self) -> str:
        extra = ", allow_missing=True" if self.allow_missing else ""
        if self.default is not None:
            extra += f", default={self.default[0]!r}"
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
            raise ValueError(f"RawTensor dtype {self.dtype!r} must be a numeric torch dtype")
        dims = (self.shape,) if isinstance(self.shape, int | str) else tuple(self.shape)
        for dim in dims:
            valid_int = isinstance(dim, int) and not isinstance(dim, bool) and dim >= -1
            if not (valid_int or (isinstance(dim, str) and dim)):
                raise ValueError(
                    f"RawTensor shape entries are ints >= -1 or feature names, got {self.shape!r}"
                )
        if sum(1 for d in dims if d == -1) > 1:
            raise ValueError(f"RawTensor shape may hold -1 once, got {self.shape!r}")
        object.__setattr__(self, "shape", dims)

    @property
    def is_static(self) -> bool:
        """True when the shape names no feature and has no -1: every record has this shape."""
        return all(isinstance(d, int) and d >= 0 for d in self.shape)

    def __repr__(self) -> str:
        return f"tt.RawTensor(dtype={self.dtype!r}, shape={self.shape!r})"


@dataclasses.dataclass(frozen=True)
class Image:
    """A bytes feature holding an encoded image (JPEG, PNG, ...), decoded to a uint8 CHW tensor.

    Decoded with torchvision.io when torchvision imports, else with Pillow; the pixels are the
    same either way.

    Args:
        mode: ``"RGB"`` (3 channels), ``"L"`` (1 channel, grey) or ``"unchanged"``.
    """

    mode: Literal["RGB", "L", "unchanged"] = "RGB"

    def __post_init__(self) -> None:
        if self.mode not in ("RGB", "L", "unchanged"):
            raise ValueError(f"Image mode must be 'RGB', 'L' or 'unchanged', got {self.mode!r}")

    def __repr__(self) -> str:
        return f"tt.Image(mode={self.mode!r})"


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
        ValueError: an unknown shorthand, naming the key.
    """
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a mapping of feature key to spec, got {type(spec).__name__}")
    normalized: dict[str, FeatureSpec] = {}
    for key, value in spec.items():
        if not isinstance(key, str):
            raise TypeError(f"feature keys are str, got {key!r}")
        if isinstance(value, str):
            if value not in _SHORTHANDS:
                raise ValueError(
                    f"feature {key!r}: unknown shorthand {value!r}; use one of {sorted(_SHORTHANDS)}"
                )
            normalized[key] = _SHORTHANDS[value]
        elif isinstance(value, FixedLen | VarLen | FixedLenSequence | RawTensor | Image):
            normalized[key] = value
        else:
            raise TypeError(f"feature {key!r}: {value!r} is not a feature spec or shorthand")
    return normalized
