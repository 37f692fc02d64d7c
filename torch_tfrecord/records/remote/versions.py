"""Which version of a remote object was read: its ETag or generation, checked against the one
listed, so that no reader mixes the bytes of two versions."""

from __future__ import annotations

from typing import Any

from ...errors import RemoteIOError
from .urls import StorageOptions, file_info

__all__ = ["ObjectChangedError", "check_version", "file_version"]


class ObjectChangedError(RemoteIOError):
    """A remote object changed (its size, ETag or generation) since the dataset looked it up: its
    bytes are never mixed with the ones read before; the message names the object."""


def file_version(info: dict[str, Any]) -> str:
    """The object's version in fsspec's ``info``: its ETag or generation ("" where there is none)."""
    for name in ("ETag", "etag", "generation", "VersionId", "md5Hash"):
        value = info.get(name)
        if value:
            return str(value).strip('"')
    return ""


def check_version(url: str, size: int, version: str, storage_options: StorageOptions, doing: str) -> None:
    """Looks the object up afresh (not from a listing fsspec remembers) and compares.

    Raises:
        ObjectChangedError: its size or version is not ``size`` and ``version``; the message
            names the URL and says what was being ``doing`` ("cached", "read").
    """
    info = file_info(url, storage_options, fresh=True)
    if int(info["size"]) != size or file_version(info) != version:
        raise ObjectChangedError(
            f"{url!r} changed while it was being {doing} (size {size} -> {info['size']}, "
            f"version {version!r} -> {file_version(info)!r})"
        )
