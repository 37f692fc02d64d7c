"""Shared fixtures: the TensorFlow-written golden files and small helpers."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from torch_tfrecord.records import remote
from torch_tfrecord.records.framing import encode_record
from torch_tfrecord.support import extension as _extension

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


@pytest.fixture
def id_shards(tmp_path: Path) -> Callable[..., list[Path]]:
    """Writes shards of Examples whose "id" feature is the record's global id.

    Each record also has "x": a float list of ``id % 3`` values, equal to the id. Shard i is
    ``shard-<i>.tfrecord`` with its ``.idx`` beside it (unless ``write_index=False``).
    """
    import torch_tfrecord as tt

    def make(sizes: Sequence[int], *, write_index: bool = True, directory: Path | None = None) -> list[Path]:
        folder = directory or tmp_path / "shards"
        folder.mkdir(parents=True, exist_ok=True)
        paths, record_id = [], 0
        for shard, size in enumerate(sizes):
            path = folder / f"shard-{shard:03d}.tfrecord"
            with tt.ExampleWriter(path, write_index=write_index) as writer:
                for _ in range(size):
                    writer.write({"id": record_id, "x": [float(record_id)] * (record_id % 3)})
                    record_id += 1
            paths.append(path)
        return paths

    return make


@pytest.fixture(params=["native", "python"])
def each_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with both readers (and decoders): the native extension and pure Python; a
    module takes it for every test with ``pytestmark = pytest.mark.usefixtures("each_reader")``."""
    if request.param == "native" and _extension.compiled is None:
        pytest.skip("the native extension is not built")
    monkeypatch.setenv(_extension.ENV_VAR, request.param)
    return str(request.param)


@pytest.fixture
def fast_retries() -> Iterator[None]:
    """The remote layer's retries in milliseconds (tests that inject faults would wait seconds)."""
    previous = remote.set_retry_policy(remote.RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05))
    yield
    remote.set_retry_policy(previous)


@pytest.fixture
def no_hedges() -> Iterator[None]:
    """No hedged remote reads, for tests that count the bytes a server sent: on a loaded machine a
    request may pass its size class's running p95 and be sent twice, its bytes counted twice
    (tests/test_remote_faults.py has the hedges)."""
    previous = remote.set_read_policy(remote.ReadPolicy(hedge=False))
    yield
    remote.set_read_policy(previous)
