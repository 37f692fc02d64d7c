"""Layer 5, the local web viewer behind ``torch-tfrecord view``: a standard-library HTTP server on
127.0.0.1 (:mod:`.server`) over what the page asks for (:mod:`.catalog`: files, pages of records,
schema, statistics, filters), and the page itself, shipped in ``static/``.

Names load lazily: the server answers for its page while the catalog's imports (numpy, protobuf)
are still under way.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import Catalog
    from .server import ViewerServer, make_server
    from .sources import ViewerError

__all__ = ["Catalog", "ViewerError", "ViewerServer", "make_server"]

_HOMES = {"Catalog": "catalog", "ViewerError": "sources", "ViewerServer": "server", "make_server": "server"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
