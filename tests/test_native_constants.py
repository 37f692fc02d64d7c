"""The status codes, kinds and modes that C and Python share: named once in the C headers, exported by
the extension under the same names, read by name on the Python side (no number written twice)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torch_tfrecord.codec import native
from torch_tfrecord.records.gather import Gathered
from torch_tfrecord.support import extension

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ["records/_gather.h", "records/_index.h", "codec/_wire.h", "data/transport/_byte_ring.h"]
pytestmark = pytest.mark.skipif(extension.compiled is None, reason="the native extension is not built")


def header_constants() -> dict[str, int]:
    """``NAME = value`` in the headers' enums and ``#define NAME (value)``."""
    found = {}
    for header in HEADERS:
        text = (ROOT / "torch_tfrecord" / header).read_text()
        for pattern in (r"\b([A-Z][A-Z_0-9]+) = (-?\d+)", r"#define ([A-Z][A-Z_0-9]+) \((-?\d+)\)"):
            found |= {name: int(value) for name, value in re.findall(pattern, text)}
    return found


def test_every_named_code_of_the_headers_is_exported_with_its_value() -> None:
    constants = header_constants()
    # GATHER_ 5, DECODE_ 8, KIND_ 4, MODE_ 4, JOIN_ 2, INDEX_NOT_CANONICAL
    assert len(constants) == 24 and "KIND_NONE" in constants
    exported = {name: getattr(extension.compiled, name) for name in constants if name != "KIND_NONE"}
    assert exported == {name: value for name, value in constants.items() if name != "KIND_NONE"}


def test_the_python_side_reads_the_same_names() -> None:
    constants = header_constants()
    assert {f"GATHER_{status.name}": int(status) for status in Gathered} == {
        name: value for name, value in constants.items() if name.startswith("GATHER_")
    }
    assert set(native._REASONS) == {n for n in constants if n.startswith("DECODE_")} - {"DECODE_OK"}
    assert set(native._KIND.values()) == {n for n in constants if n.startswith("KIND_")} - {"KIND_NONE"}
    assert native.Rejected(constants["DECODE_CRC"], 0).reason == "a CRC does not match"
