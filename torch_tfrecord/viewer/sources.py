"""The files one ``torch-tfrecord view`` shows: its paths (files, globs, directories, TFDS
directories, URLs) expanded, before anything heavier is imported: the command says that a path
holds no TFRecord file before it prints an address.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import TFRecordError
from ..integrations.tfds.info import expand_with_tfds

__all__ = ["ViewerError", "expand_paths"]


class ViewerError(TFRecordError, LookupError):
    """A request for a file, record or feature that is not there."""


def expand_paths(
    paths: Sequence[str], storage_options: dict[str, Any] | None = None
) -> tuple[list[str], dict[str, int]]:
    """The data files of ``paths``, and the records TFDS's ``dataset_info.json`` says some hold.

    Raises:
        ViewerError: ``paths`` hold no TFRecord file.
        SourceNotFoundError: a path or glob matches nothing.
    """
    files, expected = expand_with_tfds(paths, storage_options)
    if not files:
        raise ViewerError(f"no TFRecord files in {', '.join(map(repr, paths))}")
    return files, expected
