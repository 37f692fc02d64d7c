"""Layer 2, the codec: serialized records to columns and tensors, and back.

Feature specs (:mod:`.spec`), the decoder's one entry point (:mod:`.decode`) over its two
backends (:mod:`.native`, :mod:`.protobuf`), images (:mod:`.image`, :mod:`.image_batch`),
Examples written (:mod:`.encode`, :mod:`.writer`), specs inferred (:mod:`.schema`), raw and
SequenceExample payloads (:mod:`.payloads`), and records described for people (:mod:`.inspect`).

``torch_tfrecord.codec.decode_batch`` and its siblings still import from here, as they did
when this was one module; they load on first use (importing a submodule needs no torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["decode_batch", "decode_example", "decode_sequence_batch", "decode_sequence_example"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".decode", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
