"""What the viewer serves, apart from HTTP: files and their indexes, pages of records (before the
index is ready, of compressed and damaged files), record views, schema (SequenceExamples, TFDS
directories), searches that go on where they stopped."""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from viewer_data import detection_record, write_detection, write_instances, write_sequences

from torch_tfrecord.codec.encode import encode_example
from torch_tfrecord.errors import SourceNotFoundError
from torch_tfrecord.records.index import default_index_path, load_index
from torch_tfrecord.records.writer import RecordWriter
from torch_tfrecord.viewer import Catalog, ViewerError
from torch_tfrecord.viewer.catalog import INLINE_PAGE
from torch_tfrecord.viewer.record_view import view_record
from torch_tfrecord.viewer.shard import Shard

TFDS = Path(__file__).resolve().parent / "data" / "tfds" / "golden_features" / "1.0.0"
pytest.importorskip("PIL", reason="the test data's images need Pillow")


def test_an_index_is_built_in_the_background_and_a_byte_offset_found(tmp_path: Path) -> None:
    path = write_detection(tmp_path, records=40)
    expected = load_index(default_index_path(str(path)))
    Path(default_index_path(str(path))).unlink()
    shard = Shard(str(path), None)
    assert shard.describe()["state"] == "pending" and shard.locate(0) is None
    shard.start()
    shard.wait(30)
    assert shard.describe()["state"] == "ready" and shard.describe()["records"] == 40
    assert (shard.table == expected).all()
    offset = int(expected[17, 0])
    assert [shard.locate(offset), shard.locate(offset + 5), shard.locate(offset - 1)] == [17, 17, 16]
    assert [r.number for r in shard.read(38, 5) or []] == [38, 39]
    shard.close()


def test_pages_before_the_index_is_ready_are_read_from_the_start(tmp_path: Path) -> None:
    path = write_detection(tmp_path, records=40)
    shard = Shard(str(path), None)  # not started: no index yet
    page = shard.read(10, 3)
    assert page is not None and [(r.number, r.offset) for r in page] == [
        (n, int(o)) for n, o in zip(range(10, 13), load_index(str(path) + ".idx")[10:13, 0], strict=True)
    ]
    assert shard.read(5000, 20) is None  # far pages wait for the index


def test_local_indexes_wait_until_allowed(tmp_path: Path) -> None:
    # loading an index (numpy) or building one competes with the first page: both wait
    indexed = write_detection(tmp_path / "indexed", records=30)
    bare = write_detection(tmp_path / "bare", records=40)
    Path(default_index_path(str(bare))).unlink()
    catalog = Catalog([str(indexed), str(bare)])
    catalog.start(build=False)
    time.sleep(0.5)
    for file in (0, 1):
        waiting = catalog.files()["files"][file]
        assert waiting["state"] == "pending" and waiting["progress"] == 0.0 and waiting["verified"] is None
        page = catalog.records(file, 0, 5)  # read from the start meanwhile
        assert [r["number"] for r in page["records"]] == [0, 1, 2, 3, 4] and page["total"] is None
    catalog.allow_work()
    for shard in catalog.shards:
        shard.wait(30)
    assert [f["records"] for f in catalog.files()["files"]] == [30, 40]


def test_the_first_page_imports_no_numpy(tmp_path: Path) -> None:
    # the viewer's first page of a local file is read from its start: no numpy (~0.1-0.3 s to
    # import) before it is served
    path = write_detection(tmp_path, records=30)
    code = (
        "import sys\n"
        "from torch_tfrecord.viewer.catalog import Catalog\n"
        "from torch_tfrecord.viewer.server import make_server\n"
        "catalog = Catalog([sys.argv[1]])\n"
        "catalog.start(build=False)\n"
        "page = catalog.records(0, 0, 20)\n"
        "print(len(page['records']), page['records'][3]['boxes'][0]['name'], 'numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["20", "fish", "False"]  # class 3 % 7 + 1 = 4


def test_a_page_that_needs_the_index_lets_its_build_begin(tmp_path: Path) -> None:
    path = write_detection(tmp_path, records=40)
    Path(default_index_path(str(path))).unlink()
    shard = Shard(str(path), None)
    shard.start(build=False)
    assert shard.read(3000, 20) is None  # past the records read from the start: it needs the index
    shard.wait(30)
    assert shard.describe()["state"] == "ready" and shard.describe()["no_jump"] is None


def test_a_compressed_file_is_paged_in_sequence(tmp_path: Path) -> None:
    path = tmp_path / "data.tfrecord.gz"
    with RecordWriter(str(path), compression="gzip") as writer:
        for number in range(30):
            writer.write(encode_example({"label": number}))
    catalog = Catalog([str(path)])
    catalog.start()
    catalog.shards[0].wait(30)
    page = catalog.records(0, 25, 10)
    assert catalog.files()["files"][0]["state"] == "sequential" and page["total"] is None
    assert [(r["number"], r["offset"], r["features"][0]["values"]) for r in page["records"]] == [
        (n, None, [n]) for n in range(25, 30)
    ]
    with pytest.raises(ViewerError):
        catalog.locate(0, 10_000)
    assert "GZIP-compressed file has no byte offsets to jump to" in catalog.files()["files"][0]["no_jump"]


def test_damaged_records_are_shown_with_what_verify_says(tmp_path: Path, records_dir: Path) -> None:
    # flipped_length: a record's length field is damaged; the viewer indexes around it and says so
    path = Path(shutil.copy(records_dir / "flipped_length.tfrecord", tmp_path / "bad.tfrecord"))
    catalog = Catalog([str(path)])
    catalog.start()
    catalog.shards[0].wait(30)
    described = catalog.files()["files"][0]
    assert described["state"] == "ready" and described["verified"] == "damaged"
    assert any("damaged region" in p for p in described["problems"])
    page = catalog.records(0, 0, 50)
    assert page["records"] and all(r["error"] is None for r in page["records"])
    assert len(page["records"]) == described["records"]


def test_record_views() -> None:
    view = view_record(encode_example({"big": [2**60, 3], "text": "a" * 300, "blob": b"\xff\x01", "f": 0.1}))
    features = {f["key"]: f for f in view["features"]}
    assert features["big"]["values"] == [str(2**60), 3]  # beyond what a JavaScript number holds exactly
    assert features["text"]["values"] == [{"text": "a" * 200, "bytes": 300}]
    assert features["blob"]["values"] == [{"bytes": 2, "hex": "ff01"}]
    assert features["f"]["values"] == [0.1]  # float32 0.1 shown with float32's digits
    assert view["image"] is None and view["kind"] == "example"
    assert view_record(b"\x07not a proto")["kind"] == "raw"


def test_small_images_come_inside_the_page(tmp_path: Path) -> None:
    payload = detection_record(0)
    view = view_record(payload, inline_limit=10_000)
    image = base64.b64decode(view["image_data"].removeprefix("data:image/png;base64,"))
    assert image.startswith(b"\x89PNG") and image in payload
    assert view_record(payload, inline_limit=len(image) - 1)["image_data"] is None  # fetched by key
    # a page's inline images stop at INLINE_PAGE; the rest are fetched one by one
    from PIL import Image

    path = tmp_path / "noise.tfrecord"  # 30 PNGs of noise, about 43 KB each
    with RecordWriter(str(path)) as writer:
        for _ in range(30):
            noise = Image.frombytes("RGB", (120, 120), os.urandom(120 * 120 * 3))
            out = io.BytesIO()
            noise.save(out, format="PNG")
            writer.write(encode_example({"image/encoded": out.getvalue()}))
    records = Catalog([str(path)]).records(0, 0, 30)["records"]
    inline = [r["image_data"] is not None for r in records]
    assert inline[0] and not inline[-1] and inline == sorted(inline, reverse=True)
    assert sum(len(r["image_data"] or "") for r in records) <= INLINE_PAGE


def test_a_record_with_instance_masks(tmp_path: Path) -> None:
    (record,) = Catalog([str(write_instances(tmp_path))]).records(0, 0, 1)["records"]
    assert record["instance_masks"] == 2 and [b["label"] for b in record["boxes"]] == [1, 1]


def test_the_schema_of_sequence_examples(tmp_path: Path) -> None:
    schema = Catalog([str(write_sequences(tmp_path))]).schema()
    assert [f["key"] for f in schema["features"]] == ["id"]
    (tokens,) = schema["feature_lists"]
    assert tokens["key"] == "tokens" and list(tokens["steps"]) == [1, 3]
    assert "'tokens': tt." in schema["sequence_code"]


def test_a_tfds_directory_shows_its_splits_and_features() -> None:
    catalog = Catalog([str(TFDS)])
    assert {Path(s.path).name.split(".")[0] for s in catalog.shards} >= {"golden_features-train"}
    (tfds,) = catalog.schema()["tfds"]
    assert tfds["name"] == "golden_features" and tfds["features"] and set(tfds["splits"]) == {"train", "test"}


def test_a_search_goes_on_where_it_stopped(tmp_path: Path) -> None:
    files = [write_detection(tmp_path / "a", records=50), write_detection(tmp_path / "b")]
    catalog = Catalog([str(path) for path in files])
    catalog.start()
    for shard in catalog.shards:
        shard.wait(30)
    everything = catalog.search("label == 2", 0, 0, limit=1000)
    assert everything["next"] is None and everything["scanned"] == 110
    found, cursor = [], [0, 0]
    while cursor is not None:
        answer = catalog.search("label == 2", *cursor, limit=7)
        found += answer["matches"]
        cursor = answer["next"]
    assert found == everything["matches"] and len(found) == 10 + 12
    assert [m["record"] for m in found[:3]] == [2, 7, 12]


def test_bad_requests_are_errors_that_say_what(tmp_path: Path) -> None:
    catalog = Catalog([str(write_detection(tmp_path, records=3))])
    with pytest.raises(ViewerError, match="no file 2"):
        catalog.records(2, 0, 10)
    with pytest.raises(ViewerError, match="count=500"):
        catalog.records(0, 0, 500)
    with pytest.raises(ViewerError, match="no class mask"):
        catalog.mask(0, 0)
    with pytest.raises(SourceNotFoundError, match="matches no data file"):
        Catalog([str(tmp_path / "nothing-*.tfrecord")])
