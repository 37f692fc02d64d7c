"""A batch's bytes or str feature packed as Arrow lays out a binary column: no Python object per value.

The native decoder gives one (:func:`torch_tfrecord.codec.native.packed_bytes`) to the Arrow
builders (:func:`torch_tfrecord.codec.arrow.plain_column`, Spark's batches), which hand its
buffers to Arrow as they are.
"""

from __future__ import annotations

import codecs
import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ByteColumn", "is_utf8"]


class ByteColumn:
    """Rows of bytes (or UTF-8 text) values, packed end to end.

    Value ``k`` is ``data[offsets[k]:offsets[k + 1]]``; row ``i`` holds the values
    ``rows[i]:rows[i + 1]``.

    Args:
        data: the values' bytes (any buffer).
        offsets: int64, ``[values + 1]``, from 0 to ``len(data)``.
        rows: int64, ``[rows + 1]``, from 0 to the number of values.
        text: the values are ``str`` (checked UTF-8, see :func:`is_utf8`).
    """

    __slots__ = ("data", "offsets", "rows", "text")

    def __init__(
        self, data: Any, offsets: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], text: bool
    ) -> None:
        self.data = data
        self.offsets = offsets
        self.rows = rows
        self.text = text

    def __len__(self) -> int:
        return len(self.rows) - 1

    def counts(self) -> npt.NDArray[np.int64]:
        """The number of values of each row."""
        return np.diff(self.rows)

    def tolist(self) -> list[list[Any]]:
        """Per row its values as Python objects (``bytes`` or ``str``)."""
        view = memoryview(self.data).cast("B")
        bounds = self.offsets.tolist()
        values: list[Any] = [bytes(view[a:b]) for a, b in itertools.pairwise(bounds)]
        if self.text:
            values = [value.decode("utf-8") for value in values]
        rows = self.rows.tolist()
        return [values[a:b] for a, b in itertools.pairwise(rows)]


def is_utf8(data: Any, offsets: npt.NDArray[np.int64]) -> bool:
    """Whether every value is UTF-8 text: the whole is, and no value starts inside a character
    (a continuation byte), so each value's characters end where it ends."""
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = offsets[:-1][offsets[:-1] < len(raw)]
    return not bool(((raw[starts] & 0xC0) == 0x80).any())
