"""Ragged batches: variable-length rows stored as one values tensor plus row offsets."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any, overload

import torch

from ..errors import UnsupportedVersionError
from .selection import is_row_selection, row_positions

__all__ = ["Ragged"]


class Ragged:
    """A batch of variable-length rows: ``values[offsets[i]:offsets[i + 1]]`` is row ``i``.

    Args:
        values: all rows concatenated, shape ``[total, *inner]``.
        offsets: int64, shape ``[batch + 1]``, starting at 0, non-decreasing, ending at ``total``.

    Example:
        >>> r = Ragged.from_rows([torch.tensor([1, 2]), torch.tensor([], dtype=torch.int64)])
        >>> len(r), r.tolist()
        (2, [[1, 2], []])
        >>> r.to_padded(-1)
        tensor([[ 1,  2],
                [-1, -1]])
    """

    __slots__ = ("offsets", "values")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor) -> None:
        if offsets.dtype != torch.int64 or offsets.dim() != 1 or len(offsets) == 0:
            raise ValueError(
                f"offsets must be a non-empty 1-D int64 tensor, got {offsets.dtype} {tuple(offsets.shape)}"
            )
        if values.dim() == 0:
            raise ValueError("values must have at least one dimension")
        if offsets[0] != 0 or offsets[-1] != len(values) or bool((offsets[1:] < offsets[:-1]).any()):
            raise ValueError(
                f"offsets must start at 0, never decrease and end at len(values)={len(values)}, "
                f"got {offsets.tolist()[:10]}{'...' if len(offsets) > 10 else ''}"
            )
        self.values = values
        self.offsets = offsets

    @classmethod
    def from_rows(cls, rows: Sequence[torch.Tensor], *, dtype: torch.dtype | None = None) -> Ragged:
        """Builds a Ragged from a list of tensors of equal inner shape."""
        if not rows:
            return cls(torch.zeros(0, dtype=dtype or torch.float32), torch.zeros(1, dtype=torch.int64))
        lengths = torch.tensor([len(row) for row in rows], dtype=torch.int64)
        offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=offsets[1:])
        values = torch.cat([row.to(dtype) if dtype is not None else row for row in rows])
        return cls(values, offsets)

    @property
    def lengths(self) -> torch.Tensor:
        """Length of each row, int64 ``[batch]``."""
        return self.offsets[1:] - self.offsets[:-1]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> torch.Tensor: ...
    @overload
    def __getitem__(self, index: slice | torch.Tensor | Sequence[int] | Sequence[bool]) -> Ragged: ...
    def __getitem__(self, index: Any) -> torch.Tensor | Ragged:
        """Row ``index`` as a tensor; a slice, a boolean mask or integer indices as a Ragged of
        those rows (``batch[key][~batch["_padding"]]`` keeps the rows that are not padding)."""
        if is_row_selection(index):
            return self._select(row_positions(index, len(self)).to(self.offsets.device))
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                rows = [self[i] for i in range(start, stop, step)]
                return Ragged.from_rows(rows, dtype=self.values.dtype) if rows else self[0:0]
            begin, end = int(self.offsets[start]), int(self.offsets[max(start, stop)])
            return Ragged(self.values[begin:end], self.offsets[start : max(start, stop) + 1] - begin)
        n = len(self)
        index = operator.index(index)
        if not -n <= index < n:
            raise IndexError(f"row {index} out of range for a Ragged of {n} rows")
        index %= n
        return self.values[int(self.offsets[index]) : int(self.offsets[index + 1])]

    def _select(self, positions: torch.Tensor) -> Ragged:
        """The rows at ``positions`` (int64, in range), in that order."""
        lengths = self.lengths[positions]
        offsets = torch.zeros(len(positions) + 1, dtype=torch.int64, device=self.offsets.device)
        torch.cumsum(lengths, 0, out=offsets[1:])
        # Value j of the result is value j - offsets[row] + starts[row] of this batch.
        shift = torch.repeat_interleave(self.offsets[:-1][positions] - offsets[:-1], lengths)
        taken = torch.arange(int(offsets[-1]), device=self.offsets.device) + shift
        return Ragged(self.values[taken.to(self.values.device)], offsets)

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def tolist(self) -> list[Any]:
        """The rows as nested Python lists."""
        bounds = self.offsets.tolist()
        values = self.values.tolist()
        return [values[a:b] for a, b in itertools.pairwise(bounds)]

    def to_padded(self, padding_value: float | bool = 0, *, length: int | None = None) -> torch.Tensor:
        """A dense ``[batch, length, *inner]`` tensor, rows padded at the end.

        Args:
            padding_value: fills the positions past each row's end.
            length: pad to this length (default: the longest row); longer rows are an error.
        """
        lengths = self.lengths
        longest = int(lengths.max()) if len(lengths) else 0
        length = longest if length is None else length
        if longest > length:
            raise ValueError(f"a row has {longest} values, more than length={length}")
        out = torch.full(
            (len(self), length, *self.values.shape[1:]),
            padding_value,
            dtype=self.values.dtype,
            device=self.values.device,
        )
        rows = torch.repeat_interleave(torch.arange(len(self), device=lengths.device), lengths)
        columns = torch.arange(len(self.values), device=lengths.device) - self.offsets[:-1][rows]
        out[rows, columns] = self.values
        return out

    def to_nested(self) -> torch.Tensor:
        """A jagged-layout ``torch.nested`` tensor sharing this batch's values.

        Raises:
            UnsupportedVersionError: torch has no jagged layout (it came in torch 2.3).
        """
        from_jagged = getattr(torch.nested, "nested_tensor_from_jagged", None)
        if from_jagged is None:
            raise UnsupportedVersionError(
                "Ragged.to_nested needs torch >= 2.3 (torch.nested's jagged layout), "
                f"found {torch.__version__}"
            )
        return from_jagged(self.values, self.offsets)  # type: ignore[no-any-return]

    def to(self, *args: Any, **kwargs: Any) -> Ragged:
        """Moves or casts the values (offsets follow the device), like ``Tensor.to``."""
        values = self.values.to(*args, **kwargs)
        return Ragged(values, self.offsets.to(values.device))

    def pin_memory(self) -> Ragged:
        """Pinned copy, so ``DataLoader(pin_memory=True)`` handles batches that hold a Ragged."""
        return Ragged(self.values.pin_memory(), self.offsets.pin_memory())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ragged):
            return NotImplemented
        return (
            self.values.dtype == other.values.dtype
            and torch.equal(self.offsets, other.offsets)
            and torch.equal(self.values, other.values)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """The shape in brief and the first values of the first rows, ``...`` where more follow.

        ``Ragged(rows=3, lengths=[2, 0, 5], dtype=torch.int64, values=[[1, 2], [], [3, 4, 5, 6, ...]])``
        """
        rows = len(self)
        lengths = self.lengths
        if rows <= _REPR_ROWS * 2:
            shape = f"lengths={lengths.tolist()}"
        else:
            shape = f"lengths={int(lengths.min())}..{int(lengths.max())}, total={len(self.values)}"
        parts = [f"rows={rows}", shape, f"dtype={self.values.dtype}"]
        if self.values.dim() > 1:
            parts.append(f"inner={tuple(self.values.shape[1:])}")
        if self.values.device.type != "cpu":
            parts.append(f"device={self.values.device}")
        first = (slice(0, _REPR_VALUES + 1),) * self.values.dim()  # never lists all of a huge row
        shown = [_short(self[i][first].tolist()) for i in range(min(rows, _REPR_ROWS))]
        if rows > _REPR_ROWS:
            shown.append("...")
        parts.append(f"values=[{', '.join(shown)}]")
        return f"Ragged({', '.join(parts)})"


_REPR_ROWS = 4  # rows whose values a repr shows
_REPR_VALUES = 6  # values shown per row (and per inner dimension)


def _short(value: Any) -> str:
    """A nested list of numbers as text, each list cut after ``_REPR_VALUES`` items with ``...``."""
    if isinstance(value, list):
        items = [_short(item) for item in value[:_REPR_VALUES]]
        if len(value) > _REPR_VALUES:
            items.append("...")
        return f"[{', '.join(items)}]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)
