"""A crafted TFDS directory (issue 44): its file name templates get TFDS's placeholders and nothing
else, every shard stays inside the dataset's directory (or its remote prefix), and its metadata
is read within stated bounds; anything else is a TFDSFormatError naming the template or file."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.errors import TFRecordError
from torch_tfrecord.integrations.tfds.info import SplitInfo, TFDSFormatError, parse_info, read_info
from torch_tfrecord.records import remote
from torch_tfrecord.records.writer import RecordWriter
from torch_tfrecord.viewer.sources import expand_paths


def _dataset(root: Path, template: str, name: str = "crafted", split: str = "train") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    info = {
        "name": name,
        "fileFormat": "tfrecord",
        "version": "1.0.0",
        "splits": [{"name": split, "shardLengths": ["1"], "filepathTemplate": template}],
    }
    (root / "dataset_info.json").write_text(json.dumps(info))
    return root


@pytest.mark.parametrize(
    "template",
    [
        "../../../../../../etc/{SPLIT}",
        "/etc/{SPLIT}",
        "{SPLIT}/../../outside",
        "sub//{SHARD_INDEX}",
        "./{SHARD_INDEX}",
        "http://elsewhere/{SHARD_INDEX}",
    ],
)
def test_a_template_that_leaves_the_directory_is_refused(tmp_path: Path, template: str) -> None:
    """Issue 44: `../../..` or an absolute path listed and served files outside the dataset
    (through the viewer's /api/blob too)."""
    root = _dataset(tmp_path / "ds" / "1.0.0", template)
    with pytest.raises(TFDSFormatError, match="file name template") as caught:
        read_info(str(root)).shard_paths("train")
    assert template[:20] in str(caught.value)
    with pytest.raises(TFRecordError):  # `torch-tfrecord view DIR` lists no file outside it
        expand_paths([str(root)])


@pytest.mark.parametrize(
    "template",
    [
        "{DATASET:>200000000}",
        "{DATASET!r}",
        "{DATASET.__class__}",
        "{0}",
        "{}",
        "{{DATASET}}",
        "{SPLIT",
        "{dataset}",
    ],
)
def test_only_tfds_placeholders_are_substituted(tmp_path: Path, template: str) -> None:
    """Issue 44: `{DATASET:>200000000}` allocated 200 MB per shard name (str.format)."""
    root = _dataset(tmp_path / "ds", template)
    tracemalloc.start()
    try:
        with pytest.raises(TFDSFormatError, match="placeholders"):
            read_info(str(root)).shard_paths("train")
        assert tracemalloc.get_traced_memory()[1] < 4 << 20  # (a 1 MiB read buffer), not 200 MB
    finally:
        tracemalloc.stop()


def test_a_name_that_leaves_the_directory_is_refused(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", "{SPLIT}-{SHARD_INDEX}", split="../../x")
    with pytest.raises(TFDSFormatError, match="leaves the dataset's directory"):
        read_info(str(root)).shard_paths("../../x")


def test_a_link_out_of_a_local_directory_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.tfrecord"
    with RecordWriter(str(secret)) as writer:
        writer.write(b"private")
    root = _dataset(tmp_path / "ds", "shards/{SHARD_INDEX}")
    (root / "shards").symlink_to(tmp_path)  # a link inside, to outside
    os.symlink(secret, tmp_path / "00000")
    with pytest.raises(TFDSFormatError, match="through a link"):
        read_info(str(root)).shard_paths("train")


def test_templates_tfds_writes_still_read(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", "{SPLIT}/{DATASET}-{SHARD_INDEX}-of-{NUM_SHARDS}.{FILEFORMAT}")
    assert read_info(str(root)).shard_paths("train") == [
        str(root / "train" / "crafted-00000-of-00001.tfrecord")
    ]
    split = SplitInfo("test", (1, 2), "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}")
    assert split.shard_names("d", "tfrecord") == [
        "d-test.tfrecord-00000-of-00002",
        "d-test.tfrecord-00001-of-00002",
    ]


def test_a_remote_dataset_stays_under_its_prefix() -> None:
    info = {
        "name": "r",
        "splits": [{"name": "train", "shardLengths": ["1"], "filepathTemplate": "../other/{SPLIT}"}],
    }
    remote.write_bytes("memory://tfds-remote/r/1.0.0/dataset_info.json", json.dumps(info).encode())
    with pytest.raises(TFDSFormatError, match="leaves the dataset's directory"):
        read_info("memory://tfds-remote/r/1.0.0").shard_paths("train")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # nesting past the parser's recursion
        '{"name": "x", "splits": {"train": 1}}',
        '{"name": "x", "splits": [7]}',
        '{"name": "x", "splits": [{"name": "t", "shardLengths": "12"}]}',
        '{"name": "x", "splits": [{"name": "t", "shardLengths": [], "filepathTemplate": 5}]}',
        '{"name": "x", "fileFormat": ["tfrecord"]}',
        '{"name": "x", "supervisedKeys": {"tuple": {"items": [1, 2]}}}',
        '{"name": "x", "splits": [{"name": "t", "shardLengths": ["1' + "0" * 5000 + '"]}]}',
        b"\xff\xfe not text".decode("latin-1"),
    ],
)
def test_malformed_dataset_info_is_a_format_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "dataset_info.json").write_text(text, encoding="latin-1" if "\xff" in text else "utf-8")
    try:
        info = read_info(str(tmp_path))
    except TFDSFormatError as error:
        assert "dataset_info.json" in str(error)
    else:
        assert info.supervised_keys is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    [
        "name",
        "splits",
        "fileFormat",
        "supervisedKeys",
        "version",
        "shardLengths",
        "filepathTemplate",
        "tuple",
        "items",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        _KEYS, _JSON | st.lists(st.dictionaries(_KEYS, _JSON, max_size=4), max_size=3), max_size=5
    )
)
def test_any_dataset_info_is_read_or_refused(document: dict[str, Any]) -> None:
    """Property: parse_info of any JSON object gives a DatasetInfo or a TFDSFormatError."""
    try:
        info = parse_info(document, "/data/x/1.0.0", "dataset_info.json")
    except TFDSFormatError:
        return
    for name in info.splits:
        try:
            paths = info.shard_paths(name)
        except TFDSFormatError:
            continue
        assert all(p.startswith("/data/x/1.0.0/") and "/../" not in p for p in paths)


_PIECES = st.sampled_from(
    [
        "{DATASET}",
        "{SPLIT}",
        "{SHARD_INDEX}",
        "{NUM_SHARDS}",
        "{SHARD_X_OF_Y}",
        "{FILEFORMAT}",
        "-",
        ".",
        "/",
        "..",
        "{",
        "}",
        "a",
        "{X}",
        ":",
        "\\",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=8).map("".join), st.sampled_from(["train", "..", "a/b", "x"]))
def test_every_shard_name_stays_inside(template: str, split: str) -> None:
    """Property: a template gives names inside the directory, or a TFDSFormatError."""
    try:
        names = SplitInfo(split, (1, 1), template).shard_names("ds", "tfrecord")
    except TFDSFormatError:
        return
    for name in names:
        assert not name.startswith("/") and "{" not in name and "}" not in name
        assert os.path.normpath(os.path.join("/d", name)).startswith("/d/")
        assert ".." not in name.split("/")
