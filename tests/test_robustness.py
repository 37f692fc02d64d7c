"""The bad-input matrix of docs/robustness.md: one test per row.

Each test makes the damage, checks what the user sees (exception class and the words of its
message: file, byte offset, record, feature key), and that nothing is lost: a skipping read
skips exactly the damage and still returns every good record.
"""

from __future__ import annotations

import gzip
import io
import re
import struct
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from wire import entry, example, ld, tag, varint

import torch_tfrecord as tt
from torch_tfrecord.records.framing import encode_record, masked_crc32c
from torch_tfrecord.records.index import index_from_sizes

GOOD = [tt.encode_example({"label": i, "x": tt.FloatList([i / 2, 1.0])}) for i in range(8)]
SPEC = {"label": tt.FixedLen((), torch.int64), "x": tt.FixedLen((2,), torch.float32)}
BAD_AT = 3  # the damaged record's number in the file-level rows


pytestmark = pytest.mark.usefixtures("each_reader")  # every test with both readers


def _framed(payloads: list[bytes]) -> bytes:
    return b"".join(encode_record(p) for p in payloads)


def _offset(record: int) -> int:
    return len(_framed(GOOD[:record]))


def _read_all(path: Path, **kwargs: Any) -> tuple[list[bytes], tt.ReadStats]:
    stats = tt.ReadStats()
    return list(tt.read_records(path, on_error="skip", stats=stats, **kwargs)), stats


def _sequential_damage(
    path: Path,
    error: type[Exception],
    *words: str,
    intact: list[bytes] = GOOD[:BAD_AT],
    lost: int | None = None,
) -> None:
    """A sequential read raises ``error`` naming the file and ``words``; skip mode keeps every
    ``intact`` record and reports one damaged region, from the damaged record on."""
    with pytest.raises(error) as caught:
        list(tt.read_records(path))
    message = str(caught.value)
    assert str(path) in message and all(word in message for word in words), message
    kept, stats = _read_all(path)
    assert kept == intact and stats.files_skipped == 0
    [region] = stats.damaged
    assert region.error == message and stats.errors == [str(region)]
    assert region.start == _offset(BAD_AT) and region.records == lost and stats.records_skipped == (lost or 0)
    after = len(_framed(intact[BAD_AT:]))  # the intact records after the damage
    assert stats.bytes_skipped == region.size == path.stat().st_size - region.start - after


# ---- framing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "cut", "words"),
    [
        ("header", 5, "record header"),
        ("payload", 12 + 4, "payload"),
        ("footer", 12 + len(GOOD[BAD_AT]) + 2, ""),
    ],
)
def test_truncated_record(tmp_path: Path, part: str, cut: int, words: str) -> None:
    path = tmp_path / f"truncated-{part}.tfrecord"
    path.write_bytes(_framed(GOOD)[: _offset(BAD_AT) + cut])
    _sequential_damage(path, tt.TruncatedRecordError, f"byte {_offset(BAD_AT)}", f"record {BAD_AT}", words)
    with pytest.raises(tt.TruncatedRecordError, match=f"record {BAD_AT}"):
        tt.build_index(path)  # tfrecord-index refuses it too: no index of a partial file


def test_partial_trailing_header_is_an_error_not_the_end(tmp_path: Path) -> None:
    path = tmp_path / "partial.tfrecord"
    path.write_bytes(_framed(GOOD[:BAD_AT]) + b"\x07\x00\x00")
    _sequential_damage(path, tt.TruncatedRecordError, "3 of 12 header bytes", f"record {BAD_AT}")


@pytest.mark.parametrize(
    ("where", "words"),
    [("length", "length CRC mismatch"), ("payload", "data CRC mismatch"), ("crc", "data CRC mismatch")],
)
def test_flipped_bit(tmp_path: Path, where: str, words: str) -> None:
    data = bytearray(_framed(GOOD))
    at = _offset(BAD_AT) + {"length": 0, "payload": 12 + 3, "crc": 12 + len(GOOD[BAD_AT])}[where]
    data[at] ^= 0x10
    path = tmp_path / f"flipped-{where}.tfrecord"
    path.write_bytes(bytes(data))
    lost = None if where == "length" else 1  # a damaged header hides how many records were there
    intact = GOOD[:BAD_AT] + GOOD[BAD_AT + 1 :]
    _sequential_damage(
        path,
        tt.CorruptRecordError,
        f"byte {_offset(BAD_AT)}",
        f"record {BAD_AT}",
        words,
        intact=intact,
        lost=lost,
    )
    if where != "length":  # the headers are sound: an index exists, and index reads skip one record
        table = index_from_sizes([len(encode_record(p)) for p in GOOD])
        tt.save_index(table, tt.default_index_path(path))
        kept, stats = _read_all(path, entries=table)
        assert kept == GOOD[:BAD_AT] + GOOD[BAD_AT + 1 :] and stats.records_skipped == 1
        dataset = tt.TFRecordDataset(path, spec=SPEC, shuffle=False, on_error="skip")
        samples = list(dataset)
        good = sorted(s["label"].item() for s in samples if not s[tt.PADDING_KEY])
        assert good == [i for i in range(8) if i != BAD_AT] and sum(s[tt.PADDING_KEY] for s in samples) == 1


def test_length_field_of_2_to_the_63(tmp_path: Path) -> None:
    length = struct.pack("<Q", 1 << 63)
    path = tmp_path / "huge-length.tfrecord"
    path.write_bytes(_framed(GOOD[:BAD_AT]) + length + struct.pack("<I", masked_crc32c(length)) + b"x" * 64)
    tracemalloc.start()
    try:
        _sequential_damage(path, tt.TruncatedRecordError, f"record {BAD_AT}", f"byte {_offset(BAD_AT)}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # refused from the header: nothing near 2**63 bytes is allocated


def test_zero_length_record_is_a_record(tmp_path: Path) -> None:
    path = tmp_path / "zero.tfrecord"
    path.write_bytes(_framed([GOOD[0], b"", GOOD[1]]))
    assert list(tt.read_records(path)) == [GOOD[0], b"", GOOD[1]]
    assert tt.decode_example(b"", {"label": tt.FixedLen((), torch.int64, default=-1)}) == {
        "label": torch.tensor(-1)
    }
    with pytest.raises(tt.MissingFeatureError, match="'label'.*record 1 of"):
        list(tt.TFRecordDataset(path, spec=SPEC, shuffle=False))


def test_empty_file_has_no_records(tmp_path: Path) -> None:
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    assert list(tt.read_records(path)) == [] and len(tt.build_index(path)) == 0
    assert tt.count_records(path) == 0 and list(tt.TFRecordDataset(path, spec=SPEC)) == []


def test_a_jpeg_is_not_a_tfrecord_file(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "photo.tfrecord"
    Image.new("RGB", (8, 8)).save(path, format="JPEG")
    with pytest.raises(
        tt.CorruptRecordError, match=r"length CRC mismatch in .*photo.tfrecord' at byte 0 \(record 0\)"
    ):
        list(tt.read_records(path))
    with pytest.raises(tt.CorruptRecordError, match="record 0"):
        tt.TFRecordDataset(path, spec=SPEC)


def test_gzip_read_as_plain(tmp_path: Path) -> None:
    path = tmp_path / "data.tfrecord"  # no .gz suffix
    path.write_bytes(gzip.compress(_framed(GOOD)))
    assert list(tt.read_records(path)) == GOOD  # "auto" knows GZIP by its magic bytes
    with pytest.raises(tt.CorruptRecordError, match=r"at byte 0 \(record 0\)"):
        list(tt.read_records(path, compression=None))
    ds = tt.TFRecordDataset(path, spec=SPEC, shuffle=False, batch_size=8)  # through a compressed index
    assert next(iter(ds))["label"].tolist() == list(range(8))


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    whole = gzip.compress(_framed(GOOD))
    path = tmp_path / "cut.tfrecord.gz"
    path.write_bytes(whole[: len(whole) // 2])
    stats = tt.ReadStats()
    kept = list(tt.read_records(path, on_error="skip", stats=stats))
    with pytest.raises(tt.CorruptRecordError, match="cut.tfrecord.gz"):
        list(tt.read_records(path))
    assert kept == GOOD[: len(kept)] and stats.files_skipped == 1  # every record before the cut
    assert not stats.damaged  # a damaged compressed stream cannot be read past the damage


def test_compressed_shards_read_with_a_plain_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rapidgzip", None)  # no `compressed` extra: Python's zlib only
    gz, zz = tmp_path / "a.tfrecord.gz", tmp_path / "b.tfrecord.zz"
    gz.write_bytes(gzip.compress(_framed(GOOD)))
    zz.write_bytes(zlib.compress(_framed(GOOD)))
    for path in (gz, zz):
        tt.save_compressed_index(tt.build_compressed_index(path), f"{path}.cidx")
        ds = tt.TFRecordDataset(path, spec="raw", batch_size=len(GOOD), shuffle="block:3", seed=1)
        assert sorted(next(iter(ds))["record"]) == sorted(GOOD)
        indexed = tt.IndexedTFRecordDataset(path, spec="raw")
        assert [indexed[i]["record"] for i in (7, 0, 3)] == [GOOD[7], GOOD[0], GOOD[3]]


def test_a_tfds_connector_not_read_is_named(tmp_path: Path) -> None:
    from torch_tfrecord.integrations.tfds import UnsupportedFeatureError

    version = tmp_path / "made_up" / "1.0.0"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text(
        '{"name": "made_up", "version": "1.0.0", "fileFormat": "tfrecord", '
        '"splits": [{"name": "train", "shardLengths": ["0"]}]}'
    )
    (version / "features.json").write_text(
        '{"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict", '
        '"featuresDict": {"features": {"sound": {"pythonClassName": "my.Waveform", "waveform": {}}}}}'
    )
    with pytest.raises(UnsupportedFeatureError, match=r"feature 'sound': the connector Waveform"):
        tt.from_tfds(version, "train")


def test_gzip_bomb_reads_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tfrecord.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 24)
    path.write_bytes(b"".join([*(compressor.compress(zeros) for _ in range(64)), compressor.flush()]))
    assert path.stat().st_size < 2 << 20  # 1 GiB of zeros in about 1 MiB
    tracemalloc.start()
    try:
        with pytest.raises(tt.CorruptRecordError, match=r"length CRC mismatch .* at byte 0 \(record 0\)"):
            list(tt.read_records(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def _indexed(tmp_path: Path, payloads: list[bytes], name: str = "data.tfrecord") -> Path:
    path = tmp_path / name
    path.write_bytes(_framed(payloads))
    tt.save_index(tt.build_index(path), tt.default_index_path(path))
    return path


def test_stale_index_after_append(tmp_path: Path) -> None:
    path = _indexed(tmp_path, GOOD)
    with path.open("ab") as f:
        f.write(encode_record(GOOD[0]))
    with pytest.raises(tt.StaleIndexError, match=r"data.tfrecord.idx.*grew.*`tfrecord-index build`\)"):
        tt.TFRecordDataset(path, spec=SPEC)


def test_stale_index_after_rewrite(tmp_path: Path) -> None:
    path = _indexed(tmp_path, GOOD)
    path.write_bytes(_framed([*GOOD[::-1], b"longer"]))  # other records, other sizes
    with pytest.raises(tt.StaleIndexError, match=r"entry \d+ .*(overlaps|gap)|ends at byte"):
        tt.IndexedTFRecordDataset(path, spec=SPEC)


def test_index_with_overlapping_or_out_of_range_entries(tmp_path: Path) -> None:
    path = tmp_path / "data.tfrecord"
    path.write_bytes(_framed(GOOD))
    table = tt.build_index(path)
    overlapping = table.copy()
    overlapping[2, 0] -= 5
    with pytest.raises(tt.StaleIndexError, match="entry 2 .* overlaps entry 1"):
        tt.check_index(overlapping, path, "overlapping.idx")
    past_end = table.copy()
    past_end[-1, 1] += 100
    with pytest.raises(tt.StaleIndexError, match="ends at byte"):
        tt.IndexedTFRecordDataset(path, spec=SPEC, index={str(path): past_end})
    with pytest.raises(tt.StaleIndexError, match=r"runs past the end"):
        list(tt.read_records(path, entries=past_end[-1:]))
    with pytest.raises(tt.StaleIndexError, match="impossible"):
        list(tt.read_records(path, entries=[[(1 << 63) - 20, 20]]))  # would wrap past int64


def test_index_for_another_file(tmp_path: Path) -> None:
    other = _indexed(tmp_path, GOOD[:5], "other.tfrecord")
    path = tmp_path / "data.tfrecord"
    path.write_bytes(_framed(GOOD))
    with pytest.raises(tt.StaleIndexError, match=r"other.tfrecord.idx.* does not describe .*data.tfrecord"):
        tt.TFRecordDataset(path, spec=SPEC, index={str(path): tt.default_index_path(other)})


# ---- records inside sound framing ------------------------------------------------------------


def _one_bad_record(
    tmp_path: Path,
    bad: bytes,
    spec: dict[str, Any],
    error: type[Exception],
    *words: str,
    good: list[bytes] = GOOD,
) -> None:
    """Record 3 of 8 is ``bad``: the dataset raises ``error`` naming it; with skip it loses only it."""
    path = _indexed(tmp_path, [*good[:BAD_AT], bad, *good[BAD_AT + 1 :]])
    for decoder in ("python", "native"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(tt.native.ENV_VAR, decoder)
            with pytest.raises(error) as caught:
                list(tt.TFRecordDataset(path, spec=spec, shuffle=False, batch_size=4))
            message = str(caught.value)
            assert f"record {BAD_AT} of '{path}'" in message and all(w in message for w in words), message
            batches = list(tt.TFRecordDataset(path, spec=spec, shuffle=False, batch_size=4, on_error="skip"))
            padding = torch.cat([b[tt.PADDING_KEY] for b in batches])
            ids = torch.cat([b[tt.RECORD_ID_KEY] for b in batches])
            assert int(padding.sum()) == 1 and sorted(ids[~padding].tolist()) == [0, 1, 2, 4, 5, 6, 7]


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    extra = GOOD[BAD_AT] + tag(15, 0) + varint(7) + ld(16, b"anything") + tag(17, 5) + b"\x00" * 4
    path = _indexed(tmp_path, [extra])
    (sample,) = tt.TFRecordDataset(path, spec=SPEC, shuffle=False)
    assert sample["label"].item() == BAD_AT


def test_wrong_wire_type(tmp_path: Path) -> None:
    # int64_list as a varint, not a message: protobuf keeps a known field of another wire type as
    # an unknown field, so the feature is there but holds no list, which TensorFlow's rule reads
    # as a missing key: an error for a FixedLen without a default.
    bad = example(entry(b"label", tag(3, 0) + varint(5)), entry(b"x", tag(2, 2) + varint(0)))
    _one_bad_record(tmp_path, bad, SPEC, tt.MissingFeatureError, "'label' has no values", "no list set")


def test_deeply_nested_groups(tmp_path: Path) -> None:
    bad = GOOD[0] + tag(20, 3) * 200 + tag(20, 4) * 200  # protobuf's depth limit is 100
    _one_bad_record(tmp_path, bad, SPEC, tt.ExampleDecodeError, "not a valid serialized Example")


def test_huge_varint(tmp_path: Path) -> None:
    bad = GOOD[0] + tag(15, 0) + b"\xff" * 10 + b"\x01"  # 11 bytes: more than a varint can have
    _one_bad_record(tmp_path, bad, SPEC, tt.ExampleDecodeError, "not a valid serialized Example")


def test_feature_of_the_wrong_type(tmp_path: Path) -> None:
    bad = tt.encode_example({"label": tt.FloatList([1.0]), "x": tt.FloatList([1.0, 2.0])})
    _one_bad_record(tmp_path, bad, SPEC, tt.FeatureTypeError, "'label'", "float")


def test_missing_feature(tmp_path: Path) -> None:
    bad = tt.encode_example({"x": tt.FloatList([1.0, 2.0])})
    _one_bad_record(tmp_path, bad, SPEC, tt.MissingFeatureError, "'label'")


def test_wrong_number_of_values(tmp_path: Path) -> None:
    bad = tt.encode_example({"label": 3, "x": tt.FloatList([1.0, 2.0, 3.0])})
    _one_bad_record(tmp_path, bad, SPEC, tt.FeatureShapeError, "'x'", "3")


def test_negative_shape_in_raw_tensor(tmp_path: Path) -> None:
    spec = {"raw": tt.RawTensor(torch.uint8, ("h", 2)), "h": tt.FixedLen((), torch.int64)}
    good = [tt.encode_example({"raw": [bytes(2 * i)], "h": i}) for i in range(8)]
    bad = tt.encode_example({"raw": [bytes(4)], "h": -2})
    _one_bad_record(tmp_path, bad, spec, tt.FeatureShapeError, "'raw'", "non-negative", good=good)


def test_an_image_that_is_not_an_image(tmp_path: Path) -> None:
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (4, 3), (1, 2, 3)).save(png, format="PNG")
    good = [tt.encode_example({"image": [png.getvalue()]})] * 8
    bad = tt.encode_example({"image": [b"\x89PNG\r\n\x1a\n not really"]})
    _one_bad_record(
        tmp_path, bad, {"image": tt.Image("RGB")}, tt.FeatureTypeError, "'image'", "decodable", good=good
    )


def _noisy_jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 256, (240, 320, 3), dtype=torch.uint8, generator=pixels).numpy()
    jpeg = io.BytesIO()
    Image.fromarray(noise).save(jpeg, format="JPEG", quality=90)
    return jpeg.getvalue()


def test_a_jpeg_damaged_below_its_crop(tmp_path: Path) -> None:
    """Cut at 90% of its bytes, below a center crop's rows (80-160 of 240): by default the decode
    stops after the crop, as TensorFlow's decode_and_crop_jpeg does, and gives the crop's pixels;
    ``verify="full"`` reads the whole file and fails the record, as a whole decode does."""
    from torch_tfrecord.codec import image_roi

    if not image_roi.available():
        pytest.skip("the region decoder (the _jpeg extension) is not built: JPEGs decode whole")
    pytest.importorskip("simplejpeg")  # the region decoder's pixels are simplejpeg's scaled decode's
    jpegs = [_noisy_jpeg(i) for i in range(8)]
    good = [tt.encode_example({"image": [jpeg]}) for jpeg in jpegs]
    bad = tt.encode_example({"image": [jpegs[BAD_AT][: len(jpegs[BAD_AT]) * 9 // 10]]})
    crop = tt.Image(size=(32, 128), crop="center")
    full = tt.Image(size=(32, 128), crop="center", verify="full")
    words = ("'image'", "Premature end of JPEG file")
    _one_bad_record(tmp_path, bad, {"image": full}, tt.FeatureTypeError, *words, good=good)
    damaged = tmp_path / "data.tfrecord"  # the same records, read with the default
    intact = _indexed(tmp_path, good, "intact.tfrecord")
    [expected], [got] = (
        list(tt.TFRecordDataset(path, spec={"image": crop}, batch_size=8, shuffle=False))
        for path in (intact, damaged)
    )
    assert torch.equal(got["image"], expected["image"])


def test_matrix_is_documented() -> None:
    """Every test here is a row of docs/robustness.md, and every row names a test here."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "robustness.md").read_text()
    named = set(re.findall(r"`test_robustness::(test_\w+)`", doc))
    here = {name for name in globals() if name.startswith("test_") and name != "test_matrix_is_documented"}
    assert named == here, named ^ here
