from __future__ import annotations

import gzip
import logging
import zlib
from pathlib import Path

import pytest
import torch

import torch_tfrecord as tt
from index_tools import cli as index_cli
from torch_tfrecord import TFRecordError, cli
from torch_tfrecord.errors import SourceNotFoundError
from torch_tfrecord.records.framing import encode_record
from torch_tfrecord.records.io import detect_compression, resolve_compression
from torch_tfrecord.records.listing import expand_sources, skip_reason


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
    assert expand_sources(tmp_path) == [*expected, str(tmp_path / "sub" / "d.tfrecord")]
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


def _write(path: Path, examples: list[dict[str, object]]) -> None:
    with tt.ExampleWriter(path, write_index=False) as writer:
        for example in examples:
            writer.write(example)


def _tfds_folder(root: Path) -> tuple[Path, list[Path]]:
    """A TFDS version folder as `tfds build` leaves it: metadata beside the shards."""
    version = root / "mnist" / "3.0.1"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text('{"name": "mnist", "splits": [{"name": "train"}]}')
    (version / "features.json").write_text('{"type": "tensorflow_datasets.core.features.FeaturesDict"}')
    (version / "label.labels.txt").write_text("0\n1\n")
    shards = []
    for split, count in (("train", 2), ("test", 1)):
        for shard in range(count):
            path = version / f"mnist-{split}.tfrecord-{shard:05d}-of-{count:05d}"
            _write(path, [{"label": [shard], "split": [split.encode()]}] * 3)
            shards.append(path)
    return version, sorted(shards)


def test_tfds_folder_reads_its_shards_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    version, shards = _tfds_folder(tmp_path)
    with caplog.at_level(logging.INFO, logger="torch_tfrecord.records.listing"):
        assert expand_sources(version) == [str(p) for p in shards]
    assert "dataset_info.json (.json file)" in caplog.text and "label.labels.txt (.txt file)" in caplog.text
    dataset = tt.TFRecordDataset(version, spec={"label": tt.FixedLen((), torch.int64)}, shuffle=False)
    assert sorted(int(sample["label"]) for sample in dataset) == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_directory_sources_are_searched_below_the_top_level(tmp_path: Path) -> None:
    for split in ("train", "eval"):
        (tmp_path / split).mkdir()
        _write(tmp_path / split / "data-00000-of-00001", [{"x": [1]}])
    (tmp_path / "README").write_text("exported by a pipeline")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / "_temporary").mkdir()
    (tmp_path / "_temporary" / "part-0").write_bytes(b"half written")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "blob").write_bytes(b"x")
    assert expand_sources(tmp_path) == [
        str(tmp_path / "eval" / "data-00000-of-00001"),
        str(tmp_path / "train" / "data-00000-of-00001"),
    ]
    assert expand_sources(tmp_path / "train") == [str(tmp_path / "train" / "data-00000-of-00001")]
    # A glob follows the same rule below its fixed part, and a file named on its own is always read.
    with pytest.raises(SourceNotFoundError, match="glob matches no data file"):
        expand_sources(str(tmp_path / "*"))  # README and _SUCCESS only; the folders are no files
    assert expand_sources(str(tmp_path / "**" / "*")) == expand_sources(tmp_path)
    assert expand_sources(tmp_path / "README") == [str(tmp_path / "README")]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("train.tfrecord-00000-of-00016", None),
        ("data.tfrecord.gz", None),
        ("part-r-00000", None),
        ("train.tfrecord.idx", ".idx file"),
        ("label_map.pbtxt", ".pbtxt file"),
        ("dataset_info.json", ".json file"),
        ("README.md", ".md file"),
        ("README", "notes"),
        ("LICENSE", "notes"),
        (".DS_Store", "hidden"),
        ("_SUCCESS", "hidden"),
        ("_temporary/part-0", "hidden"),
        ("train/.x/part-0", "hidden"),
    ],
)
def test_skip_reason(name: str, reason: str | None) -> None:
    assert skip_reason(name) == reason


def test_clis_take_the_same_directory_rule(tmp_path: Path) -> None:
    version, shards = _tfds_folder(tmp_path)
    assert cli.main(["count", str(tmp_path)]) == 0
    assert index_cli.main(["build", "-j", "1", "-q", str(tmp_path)]) == 0
    assert sorted(version.glob("*.idx")) == [Path(f"{p}.idx") for p in shards]
    assert index_cli.main(["check", str(tmp_path)]) == 0


def test_remote_directory_is_searched_below_the_top_level(tmp_path: Path) -> None:
    version, shards = _tfds_folder(tmp_path)
    fs = tt.remote.filesystem("memory://")[0]
    for path in sorted(version.iterdir()):
        fs.pipe_file(f"/tfds/mnist/3.0.1/{path.name}", path.read_bytes())
    fs.pipe_file("/tfds/downloads/.hidden", b"x")
    try:
        found = expand_sources("memory://tfds")
        assert [p.rsplit("/tfds/", 1)[1] for p in found] == [f"mnist/3.0.1/{p.name}" for p in shards]
        assert expand_sources("memory://tfds/mnist/*/*") == found
        assert sum(tt.count_records(p) for p in found) == 9
    finally:
        fs.rm("/tfds", recursive=True)
