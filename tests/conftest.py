"""Shared fixtures: the TensorFlow-written golden files and small helpers."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from torch_tfrecord.framing import encode_record

DATA = Path(__file__).parent / "data"
RECORDS = DATA / "records"


@pytest.fixture(scope="session")
def records_dir() -> Path:
    """tests/data/records: files written by real TensorFlow (see make_records_golden.py)."""
    return RECORDS


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    """expected.json of tests/data/records, with the payloads decoded to bytes."""
    expected = json.loads((RECORDS / "expected.json").read_text())
    expected["payloads"] = [base64.b64decode(p) for p in expected["payloads"]]
    return expected


@pytest.fixture
def golden_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Copies a golden file into tmp_path (tests may write indexes beside it)."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile(RECORDS / name, target)
        return target

    return copy


@pytest.fixture
def write_raw(tmp_path: Path) -> Callable[..., Path]:
    """Writes framed records (and optional trailing bytes) to a file in tmp_path."""

    def write(payloads: Sequence[bytes], name: str = "data.tfrecord", tail: bytes = b"") -> Path:
        path = tmp_path / name
        path.write_bytes(b"".join(encode_record(p) for p in payloads) + tail)
        return path

    return write
