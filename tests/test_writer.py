from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from torch_tfrecord import RecordWriter, ShardedExampleWriter, load_index, read_records
from torch_tfrecord.records.index import build_index, default_index_path


def test_byte_identical_to_tensorflow(tmp_path: Path, records_dir: Path, golden: dict) -> None:
    path = tmp_path / "ours.tfrecord"
    with RecordWriter(path) as writer:
        for payload in golden["payloads"]:
            writer.write(payload)
    assert path.read_bytes() == (records_dir / "plain.tfrecord").read_bytes()
    assert (tmp_path / "ours.tfrecord.idx").read_text() == (
        records_dir / "plain.tfrecord.dali.idx"
    ).read_text()


def test_empty_file_identical_to_tensorflow(tmp_path: Path, records_dir: Path) -> None:
    with RecordWriter(tmp_path / "e.tfrecord"):
        pass
    assert (tmp_path / "e.tfrecord").read_bytes() == (records_dir / "empty.tfrecord").read_bytes() == b""
    assert (tmp_path / "e.tfrecord.idx").read_bytes() == b""
    assert len(load_index(tmp_path / "e.tfrecord.idx", data_path=tmp_path / "e.tfrecord")) == 0


@pytest.mark.parametrize(
    ("compression", "name", "decompress"),
    [
        ("gzip", "gzip.tfrecord.gz", gzip.decompress),
        ("zlib", "zlib.tfrecord.zz", zlib.decompress),
    ],
)
def test_compressed_streams_match_tensorflow_and_are_deterministic(
    compression: str, name: str, decompress, tmp_path: Path, records_dir: Path, golden: dict
) -> None:
    outputs = []
    for attempt in range(2):
        path = tmp_path / f"{attempt}-{name}"
        with RecordWriter(path, compression=compression) as writer:  # type: ignore[arg-type]
            for payload in golden["payloads"]:
                writer.write(payload)
        outputs.append(path.read_bytes())
        assert not os.path.exists(default_index_path(path))  # no index for a compressed file
        assert list(read_records(path)) == golden["payloads"]
    assert outputs[0] == outputs[1]
    assert decompress(outputs[0]) == decompress((records_dir / name).read_bytes())


def test_nothing_under_final_name_until_close(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    writer = RecordWriter(path)
    writer.write(b"x" * 100)
    writer.flush()
    assert not path.exists() and not (tmp_path / "a.tfrecord.idx").exists()
    assert len(list(tmp_path.iterdir())) == 1  # the hidden temporary file
    writer.close()
    writer.close()  # idempotent
    assert list(read_records(path)) == [b"x" * 100]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfrecord", "a.tfrecord.idx"]
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"more")


def test_exception_in_with_block_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    path.write_bytes(b"old contents")
    with pytest.raises(RuntimeError), RecordWriter(path) as writer:
        writer.write(b"new")
        raise RuntimeError("boom")
    assert path.read_bytes() == b"old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfrecord"]


def test_killed_writer_leaves_no_file_under_final_name(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        from torch_tfrecord import RecordWriter
        writer = RecordWriter({str(tmp_path / "a.tfrecord")!r})
        for i in range(1000):
            writer.write(b"x" * 1000)
        writer.flush()
        os._exit(9)  # dies mid-file, as a killed job would
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert result.returncode == 9
    assert not (tmp_path / "a.tfrecord").exists()
    assert not (tmp_path / "a.tfrecord.idx").exists()


def test_index_is_in_place_before_its_file_and_gone_if_the_file_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file under its final name always has its index: the index is published first."""
    path = tmp_path / "a.tfrecord"
    seen_at_rename = []
    real_replace = os.replace

    def replace(source: str, target: str) -> None:
        if target == str(path):
            seen_at_rename.append((tmp_path / "a.tfrecord.idx").exists())
            raise OSError("disk gone")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    writer = RecordWriter(path)
    writer.write(b"payload")
    with pytest.raises(OSError, match="disk gone"):
        writer.close()
    assert seen_at_rename == [True]  # the index was there before the data's rename
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # and nothing is left when it fails


def test_replacing_without_index_removes_the_stale_index(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as writer:
        writer.write(b"first")
    assert (tmp_path / "a.tfrecord.idx").exists()
    with RecordWriter(path, write_index=False) as writer:
        writer.write(b"second version")
    assert not (tmp_path / "a.tfrecord.idx").exists()


def test_writer_arguments_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compression"):
        RecordWriter(tmp_path / "a", compression="lz4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compression_level"):
        RecordWriter(tmp_path / "a", compression="gzip", compression_level=11)
    with pytest.raises(ValueError, match="max_records"):
        ShardedExampleWriter(tmp_path / "s")
    with pytest.raises(ValueError, match="max_records"):
        ShardedExampleWriter(tmp_path / "s", max_records=0)
    assert list(tmp_path.iterdir()) == []


def test_sharded_writer_rolls_over_by_records(tmp_path: Path) -> None:
    payloads = [bytes([i]) * i for i in range(25)]
    with ShardedExampleWriter(tmp_path / "train", max_records=10) as writer:
        for payload in payloads:
            writer.write(payload)
    names = [Path(p).name for p in writer.shard_paths]
    assert names == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    manifest = ["train.manifest.json", "train.manifest.tables.npz"]  # what a reader starts from
    indexes = [n + ".idx" for n in names]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names + indexes + manifest)
    read = [list(read_records(p)) for p in writer.shard_paths]
    assert [len(r) for r in read] == [10, 10, 5]
    assert [r for shard in read for r in shard] == payloads
    for path in writer.shard_paths:
        assert (load_index(path + ".idx", data_path=path) == build_index(path)).all()


def test_sharded_writer_rolls_over_by_bytes(tmp_path: Path) -> None:
    with ShardedExampleWriter(tmp_path / "s", max_bytes=100) as writer:
        for size in [30, 30, 30, 200, 10]:
            writer.write(b"z" * size)
    sizes = [os.path.getsize(p) for p in writer.shard_paths]
    # 46 + 46 fits in 100, the third would not; 216 gets a shard alone.
    assert sizes == [92, 46, 216, 26]
    assert all(p.endswith("-of-00004.tfrecord") for p in writer.shard_paths)


def test_sharded_writer_hides_shards_until_close_and_aborts_on_error(tmp_path: Path) -> None:
    writer = ShardedExampleWriter(tmp_path / "s", max_records=2)
    for i in range(5):
        writer.write(b"%d" % i)
    assert not any(p.name.startswith("s-") for p in tmp_path.iterdir())
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError), ShardedExampleWriter(tmp_path / "t", max_records=2) as sharded:
        for i in range(5):
            sharded.write(b"%d" % i)
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []


def test_sharded_writer_with_no_records_and_compression(tmp_path: Path) -> None:
    with ShardedExampleWriter(tmp_path / "e", max_records=5) as writer:
        pass
    assert [Path(p).name for p in writer.shard_paths] == ["e-00000-of-00001.tfrecord"]
    with ShardedExampleWriter(tmp_path / "g", max_records=2, compression="gzip") as writer:
        for i in range(3):
            writer.write(b"%d" % i)
    assert [Path(p).name for p in writer.shard_paths] == [
        "g-00000-of-00002.tfrecord.gz",
        "g-00001-of-00002.tfrecord.gz",
    ]
    assert [r for p in writer.shard_paths for r in read_records(p)] == [b"0", b"1", b"2"]
    assert writer.records_written == 3


def test_a_2d_tensor_is_stored_flat_and_its_shape_comes_back_from_the_spec(tmp_path: Path) -> None:
    import torch

    import torch_tfrecord as tt

    matrix = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    path = tmp_path / "matrix.tfrecord"
    with tt.ExampleWriter(str(path)) as writer:
        writer.write({"m": matrix, "ints": matrix.long().T})
    [payload] = list(read_records(path))
    flat = tt.decode_example(payload, {"m": "float", "ints": "int"})
    assert flat["m"].tolist() == matrix.reshape(-1).tolist()  # the values, row-major
    assert flat["ints"].tolist() == matrix.long().T.reshape(-1).tolist()  # of the tensor as given
    shaped = tt.decode_example(
        payload, {"m": tt.FixedLen((3, 4), torch.float32), "ints": tt.FixedLen((4, 3), torch.int64)}
    )
    assert torch.equal(shaped["m"], matrix) and torch.equal(shaped["ints"], matrix.long().T)
    with pytest.raises(tt.FeatureShapeError, match="'m'"):
        tt.decode_example(payload, {"m": tt.FixedLen((5, 4), torch.float32)})
