"""CSV rows to Examples: one Example per row, one feature per column.

Column types are inferred (``int`` when every value is an integer, else ``float`` when every
value is a number, else ``bytes``) or given: ``{"age": "int", "name": "bytes"}``. An empty cell
leaves its feature out of that row's Example (read it back with ``tt.VarLen`` or a default).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from collections.abc import Mapping, Sequence

from ..codec.encode import BytesList, FloatList, Int64List, encode_example
from ._write import ConversionError

__all__ = ["COLUMN_TYPES", "RowTask", "csv_tasks", "encode_row", "infer_types", "parse_types"]

COLUMN_TYPES = ("int", "float", "bytes")


@dataclasses.dataclass(frozen=True)
class RowTask:
    line: int
    cells: tuple[str, ...]


def parse_types(text: str) -> dict[str, str]:
    """``"age:int,name:bytes"`` as ``{"age": "int", "name": "bytes"}``."""
    types = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        column, sep, kind = part.rpartition(":")
        if not sep or kind not in COLUMN_TYPES or not column:
            raise ConversionError(
                f"--spec entry {part!r} is not COLUMN:TYPE with TYPE one of {', '.join(COLUMN_TYPES)}"
            )
        types[column] = kind
    return types


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _is_float(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def infer_types(header: Sequence[str], rows: Sequence[RowTask]) -> dict[str, str]:
    """The narrowest type of each column that all its non-empty cells fit."""
    types = {}
    for i, column in enumerate(header):
        values = [row.cells[i] for row in rows if i < len(row.cells) and row.cells[i] != ""]
        if values and all(_is_int(v) for v in values):
            types[column] = "int"
        elif values and all(_is_float(v) for v in values):
            types[column] = "float"
        else:
            types[column] = "bytes"
    return types


def csv_tasks(
    text: str, *, source: str = "<csv>", types: Mapping[str, str] | None = None, delimiter: str = ","
) -> tuple[list[RowTask], tuple[str, ...], dict[str, str]]:
    """The rows of a CSV text with a header line, and each column's type.

    Raises:
        ConversionError: no header, a repeated column name, or a type for an unknown column.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = tuple(next(reader))
    except StopIteration:
        raise ConversionError(f"{source}: empty, expected a header line") from None
    except csv.Error as error:
        raise ConversionError(f"{source} line 1: {error}") from None
    if len(set(header)) != len(header) or "" in header:
        raise ConversionError(f"{source}: column names must be unique and non-empty: {list(header)}")
    rows = []
    try:
        for row in reader:
            if row:
                rows.append(RowTask(reader.line_num, tuple(row)))
    except csv.Error as error:
        raise ConversionError(f"{source} line {reader.line_num}: {error}") from None
    given = dict(types or {})
    wrong = {column: kind for column, kind in given.items() if kind not in COLUMN_TYPES}
    if wrong:
        raise ConversionError(f"{source}: column types must be one of {', '.join(COLUMN_TYPES)}, got {wrong}")
    unknown = sorted(set(given) - set(header))
    if unknown:
        raise ConversionError(f"{source}: --spec names columns that are not in the header: {unknown}")
    inferred = infer_types(header, rows)
    inferred.update(given)
    return rows, header, inferred


def encode_row(task: RowTask, *, header: tuple[str, ...], types: Mapping[str, str], source: str) -> bytes:
    if len(task.cells) != len(header):
        raise ConversionError(
            f"{source} line {task.line}: {len(task.cells)} fields, the header has {len(header)}"
        )
    features: dict[str, object] = {}
    for column, cell in zip(header, task.cells, strict=True):
        if cell == "":
            continue
        kind = types[column]
        try:
            if kind == "int":
                features[column] = Int64List([int(cell)])
            elif kind == "float":
                features[column] = FloatList([float(cell)])
            else:
                features[column] = BytesList([cell.encode()])
        except ValueError:
            raise ConversionError(
                f"{source} line {task.line} column {column!r}: {cell!r} is not {kind}"
            ) from None
    return encode_example(features)  # type: ignore[arg-type]


def encoder(header: tuple[str, ...], types: Mapping[str, str], source: str) -> functools.partial[bytes]:
    return functools.partial(encode_row, header=header, types=dict(types), source=source)
