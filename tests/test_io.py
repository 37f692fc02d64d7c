from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from torch_tfrecord import TFRecordError
from torch_tfrecord.errors import SourceNotFoundError
from torch_tfrecord.framing import encode_record
from torch_tfrecord.io import detect_compression, expand_sources, resolve_compression


def test_detects_by_bytes_before_suffix(records_dir: Path) -> None:
    for name, expected in [
        ("plain.tfrecord", None),
        ("gzip.tfrecord.gz", "gzip"),
        ("zlib.tfrecord.zz", "zlib"),
        ("gzip_nosuffix.tfrecord", "gzip"),
        ("zlib_nosuffix.tfrecord", "zlib"),
        ("empty.tfrecord", None),
        # Starts with 1f 8b, the GZIP magic, but is a valid plain header: plain wins.
        ("gzip_magic_plain.tfrecord", None),
    ]:
        assert resolve_compression("auto", records_dir / name) == expected, name
    assert (records_dir / "gzip_magic_plain.tfrecord").read_bytes()[:2] == b"\x1f\x8b"


def test_suffix_decides_only_when_bytes_say_nothing() -> None:
    junk = b"\x01\x02\x03\x04" * 4
    assert detect_compression(junk, "a.tfrecord.gz") == "gzip"
    assert detect_compression(junk, "a.ZLIB") == "zlib"
    assert detect_compression(junk, "a.zz") == "zlib"
    assert detect_compression(junk, "a.tfrecord") is None
    assert detect_compression(encode_record(b"x")[:12], "a.gz") is None
    assert detect_compression(gzip.compress(b"abc")[:12], "a") == "gzip"
    assert detect_compression(zlib.compress(b"abc")[:12], "a") == "zlib"


def test_unknown_compression_name(records_dir: Path) -> None:
    with pytest.raises(ValueError, match="compression"):
        resolve_compression("bz2", records_dir / "plain.tfrecord")  # type: ignore[arg-type]


def test_expand_sources(tmp_path: Path) -> None:
    for name in ["b.tfrecord", "a.tfrecord", "a.tfrecord.idx", ".hidden", "c.gz"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.tfrecord").write_bytes(b"")
    expected = [str(tmp_path / n) for n in ["a.tfrecord", "b.tfrecord", "c.gz"]]
    assert expand_sources(tmp_path) == expected
    assert expand_sources(str(tmp_path / "*.tfrecord*")) == expected[:2]
    assert (
        expand_sources([tmp_path / "b.tfrecord", str(tmp_path / "a.tfrecord"), tmp_path / "b.tfrecord"])
        == expected[:2]
    )
    assert expand_sources(str(tmp_path / "**" / "d.tfrecord")) == [str(tmp_path / "sub" / "d.tfrecord")]
    with pytest.raises(SourceNotFoundError, match="no such file"):
        expand_sources(tmp_path / "missing.tfrecord")
    with pytest.raises(SourceNotFoundError, match="glob matches no data file"):
        expand_sources(str(tmp_path / "*.nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TFRecordError, match="directory holds no data file"):
        expand_sources(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        expand_sources([tmp_path / "nope"])


def test_missing_files_are_source_not_found(tmp_path: Path) -> None:
    import torch_tfrecord as tt

    missing = tmp_path / "missing.tfrecord"
    for call in [
        lambda: list(tt.read_records(missing)),
        lambda: list(tt.read_records(missing, compression=None)),
        lambda: tt.build_index(missing),
        lambda: tt.load_index(tmp_path / "missing.idx"),
        lambda: tt.count_records(missing),
    ]:
        with pytest.raises(SourceNotFoundError, match="missing"):
            call()
