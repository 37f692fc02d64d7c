"""Layer 5, the local web viewer behind ``torch-tfrecord view``: a standard-library HTTP server on
127.0.0.1 (:mod:`.server`) over what the page asks for (:mod:`.catalog`: files, pages of records,
schema, statistics, filters), and the page itself, shipped in ``static/``.
"""

from __future__ import annotations

from .catalog import Catalog, ViewerError
from .server import ViewerServer, make_server

__all__ = ["Catalog", "ViewerError", "ViewerServer", "make_server"]
