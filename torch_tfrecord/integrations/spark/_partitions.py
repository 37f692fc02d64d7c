"""Hive-style partition folders (``country=DE/``): named when a write splits its rows by columns, and
found again when a read lists the shards, each ``key=value`` folder a column, as Spark's own file
sources do.

A folder's value is typed as Spark types a partition value of Parquet: a column whose every value
is an integer is ``int`` (``bigint`` where one does not fit in 32 bits), one of numbers ``double``,
any other ``string``; ``__HIVE_DEFAULT_PARTITION__`` is a null.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any

from pyspark.sql import types as st

from ...errors import SpecError
from ...records.io import is_url, local_path
from ..ranges import ReadPlan

__all__ = ["NULL_FOLDER", "Partitioning", "below_folders", "partition_folder", "partitioning"]

NULL_FOLDER = "__HIVE_DEFAULT_PARTITION__"
_INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _escaped(value: Any) -> str:
    if value is None:
        return NULL_FOLDER
    if isinstance(value, bool):
        return "true" if value else "false"
    return urllib.parse.quote(str(value), safe=" ")


def partition_folder(names: Sequence[str], values: Sequence[Any]) -> str:
    """The folders of a row whose partition columns ``names`` hold ``values``: ``country=DE/k=1``
    (``/``, ``=``, ``%`` ... escaped as ``%2F``; a null ``__HIVE_DEFAULT_PARTITION__``)."""
    return "/".join(f"{_escaped(name)}={_escaped(value)}" for name, value in zip(names, values, strict=True))


@dataclasses.dataclass(frozen=True)
class Partitioning:
    """The partition columns of a read: their fields (in folder order) and each shard's values.

    Attributes:
        fields: the columns, typed (none: the shards are not in ``key=value`` folders).
        values: each shard's values as its folders name them (None: a null), by its path, in the
            fields' order.
    """

    fields: list[st.StructField]
    values: dict[str, tuple[str | None, ...]]

    @property
    def names(self) -> list[str]:
        return [field.name for field in self.fields]


def _folders(relative: str) -> list[tuple[str, str | None]]:
    """The ``key=value`` folders above a file (path relative to the dataset's folder), from the
    top; walking up from the file, the first folder that is not ``key=value`` ends them."""
    found: list[tuple[str, str | None]] = []
    for part in reversed(relative.split("/")[:-1]):
        key, equals, value = part.partition("=")
        if not equals or not key:
            break
        text = urllib.parse.unquote(value)
        found.append((urllib.parse.unquote(key), None if text == NULL_FOLDER else text))
    return found[::-1]


def _spark_type(texts: list[str]) -> st.DataType:
    if texts and all(_INTEGER.fullmatch(text) for text in texts):
        numbers = [int(text) for text in texts]
        if min(numbers) >= -(2**31) and max(numbers) < 2**31:
            return st.IntegerType()
        if min(numbers) >= -(2**63) and max(numbers) < 2**63:
            return st.LongType()
    if texts and all(_NUMBER.fullmatch(text) for text in texts):
        return st.DoubleType()
    return st.StringType()


def below_folders(plan: ReadPlan, sources: Sequence[str]) -> list[str | None]:
    """Each shard's path below the dataset's folder: the manifest's (its shards' names), else the
    folder named as a source that holds it; None for a file named on its own or by a glob."""
    if plan.manifest is not None:
        return [shard.name for shard in plan.manifest.shards]
    folders = []
    for source in sources:
        name = local_path(source)
        if glob.has_magic(name):
            continue
        name = name.rstrip("/") if is_url(name) else os.path.abspath(name)
        folders.append(name + "/")
    below: list[str | None] = []
    for path in plan.paths:
        full = path if is_url(path) else os.path.abspath(local_path(path))
        base = next((folder for folder in folders if full.startswith(folder)), None)
        relative = full[len(base) :] if base is not None else None
        below.append(relative.replace(os.sep, "/") if relative is not None else None)
    return below


def partitioning(paths: Sequence[str], relative: Sequence[str | None]) -> Partitioning:
    """The partition columns of the shards ``paths``.

    Args:
        paths: the shards.
        relative: each one's path below the dataset's folder (the manifest's, or the folder named
            as a source), ``/``-separated; None: a file named on its own or by a glob, which is
            in no partition.

    Raises:
        SpecError: shards whose folders name different columns (``a=1/x`` beside ``b=2/y``, or
            beside a shard in no folder), naming two of them.
    """
    columns: list[str] | None = None
    first = ""
    found: dict[str, list[tuple[str, str | None]]] = {}
    for path, below in zip(paths, relative, strict=True):
        folders = _folders(below) if below is not None else []
        names = [key for key, _ in folders]
        if columns is None:
            columns, first = names, path
        elif names != columns:
            raise SpecError(
                f"the shards' partition folders disagree: {first!r} is in {columns or 'none'}, "
                f"{path!r} in {names or 'none'}; read one of them, or each apart"
            )
        found[path] = folders
    if not columns:
        return Partitioning([], {})
    if len(set(columns)) != len(columns):
        raise SpecError(f"{first!r}: a partition column named twice in its folders {columns}")
    fields = []
    for i, name in enumerate(columns):
        texts = sorted({text for folders in found.values() if (text := folders[i][1]) is not None})
        fields.append(st.StructField(name, _spark_type(texts), nullable=True))
    values = {path: tuple(text for _, text in folders) for path, folders in found.items()}
    return Partitioning(fields, values)
