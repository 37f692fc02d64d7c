"""The datasets on records that are not Examples: spec="raw" and SequenceExamples.

Raw payloads are parsed by a transform as a protobuf message of another type (built here from
a descriptor, no generated module); SequenceExamples written by TensorFlow (tests/data/examples,
made by make_examples_golden.py) come through the datasets with 2 workers exactly as
TensorFlow's parse_sequence_example returns them, with the specs written by hand as with the
specs that tt.infer_spec proposes for the file.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.errors import SpecError
from torch_tfrecord.records.framing import encode_record

EXAMPLES = Path(__file__).parent / "data" / "examples"
CONTEXT_SPEC = {"id": tt.FixedLen((), bytes), "length": tt.FixedLen((), torch.int64)}
SEQUENCE_SPEC = {
    "frames": tt.FixedLenSequence((3,), torch.float32),
    "words": tt.FixedLenSequence((), bytes, allow_missing=True),
    "ids": tt.VarLen(torch.int64),
}


def _point_class() -> Any:
    """A message type that is not an Example: ``message Point { int64 id = 1; string name = 2;
    repeated float xy = 3; }``."""
    file = descriptor_pb2.FileDescriptorProto(name="point_test.proto", package="tt_test")
    message = file.message_type.add(name="Point")
    label, fields = descriptor_pb2.FieldDescriptorProto, [("id", 1, "TYPE_INT64"), ("name", 2, "TYPE_STRING")]
    for name, number, kind in fields:
        message.field.add(name=name, number=number, type=getattr(label, kind), label=label.LABEL_OPTIONAL)
    message.field.add(name="xy", number=3, type=label.TYPE_FLOAT, label=label.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tt_test.Point"))


Point = _point_class()


def parse_point(sample: dict[str, Any]) -> dict[str, Any]:
    point = Point.FromString(sample["record"])
    return {
        "id": torch.tensor(point.id),
        "name": point.name,
        "xy": torch.tensor(list(point.xy)),
        "_record_id": sample["_record_id"],
        "_padding": sample["_padding"],
    }


@pytest.fixture
def points(tmp_path: Path) -> list[Path]:
    paths = []
    for shard, ids in enumerate([range(0, 5), range(5, 6), range(6, 13)]):
        path = tmp_path / f"points-{shard}.tfrecord"
        with tt.RecordWriter(path) as writer:
            for i in ids:
                writer.write(Point(id=i, name=f"p{i}", xy=[i, -i]).SerializeToString())
        paths.append(path)
    return paths


def test_raw_records_parsed_by_a_transform_with_two_workers(points: list[Path]) -> None:
    ds = tt.TFRecordDataset(points, spec="raw", transform=parse_point, seed=3)
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=tt.collate)
    batches = list(loader)
    ids = [i for b in batches for i in b["id"].tolist()]
    assert sorted(ids) == list(range(13)) and ids != list(range(13))  # shuffled, exactly once
    assert [i for b in batches for i in b["_record_id"].tolist()] == ids
    for batch in batches:
        assert batch["name"] == [f"p{i}" for i in batch["id"].tolist()]
        assert torch.equal(batch["xy"], torch.stack([batch["id"], -batch["id"]], 1).float())


def test_raw_batches_cross_from_workers_as_bytes(points: list[Path]) -> None:
    ds = tt.TFRecordDataset(points, spec="raw", batch_size=4, shuffle="shards", drop_last=False)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(batches) == 4
    seen = []
    for batch in batches:
        assert set(batch) == {"record", "_record_id", "_padding"}
        assert all(type(record) is bytes for record in batch["record"])
        seen += [(Point.FromString(r).id, i) for r, i in zip(batch["record"], batch["_record_id"].tolist())]
    assert all(point_id == record_id for point_id, record_id in seen)
    assert sorted({i for i, _ in seen}) == list(range(13))


def test_raw_on_indexed_dataset(points: list[Path]) -> None:
    ds = tt.IndexedTFRecordDataset(points, spec="raw")
    assert Point.FromString(ds[6]["record"]).id == 6
    assert [Point.FromString(s["record"]).id for s in ds.__getitems__([12, 0])] == [12, 0]


def test_raw_resumes_with_another_worker_count(points: list[Path]) -> None:
    def make() -> tt.TFRecordDataset:
        return tt.TFRecordDataset(points, spec="raw", batch_size=2, seed=5, drop_last=False)

    whole = [i for b in DataLoader(make(), batch_size=None, num_workers=2) for i in b["_record_id"].tolist()]
    stopped = make()
    taken = []
    for batch in DataLoader(stopped, batch_size=None, num_workers=2):
        taken += batch["_record_id"].tolist()
        if len(taken) == 6:
            break
    resumed = make()
    resumed.load_state_dict(stopped.state_dict(consumed=3))
    rest = [i for b in DataLoader(resumed, batch_size=None, num_workers=1) for i in b["_record_id"].tolist()]
    assert sorted(taken + rest) == sorted(whole)


def test_raw_crc_error_raises_or_is_skipped(tmp_path: Path) -> None:
    good = [Point(id=i).SerializeToString() for i in range(4)]
    framed = [bytearray(encode_record(p)) for p in good]
    framed[2][-1] ^= 0xFF  # the data CRC of record 2
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(b"".join(framed))
    with pytest.raises(tt.TFRecordError, match="damaged.tfrecord"):
        list(tt.TFRecordDataset(path, spec="raw", batch_size=4, shuffle=False))
    (batch,) = tt.TFRecordDataset(path, spec="raw", batch_size=4, shuffle=False, on_error="skip")
    assert batch["_padding"].tolist() == [False, False, True, False]
    assert [Point.FromString(r).id for r in batch["record"]] == [0, 1, 3, 3]


def _tf_results() -> dict[str, Any]:
    return json.loads((EXAMPLES / "expected.json").read_text())["sequences"]  # type: ignore[no-any-return]


def _dense(entry: dict[str, Any]) -> torch.Tensor:
    return torch.tensor(entry["values"], dtype=getattr(torch, entry["dtype"])).reshape(entry["shape"])


def _specs(source: str) -> dict[str, Any]:
    """The specs written by hand, or those that infer_spec proposes for the file."""
    if source == "written":
        return {"context_spec": CONTEXT_SPEC, "sequence_spec": SEQUENCE_SPEC}
    return dict(tt.infer_spec(EXAMPLES / "sequences.tfrecord"))


def _sequences(source: str = "written", **kwargs: Any) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(EXAMPLES / "sequences.tfrecord", **_specs(source), **kwargs)


@pytest.mark.parametrize("source", ["written", "inferred"])
def test_sequence_batches_equal_tensorflow_with_two_workers(source: str) -> None:
    expected = _tf_results()
    ds = _sequences(source, batch_size=3, shuffle=False)
    (batch,) = DataLoader(ds, batch_size=None, num_workers=2)
    assert batch["id"] == [base64.b64decode(b) for b in expected["context"]["id"]["bytes"]]
    assert torch.equal(batch["length"], _dense(expected["context"]["length"]))
    assert torch.equal(batch["frames"], _dense(expected["sequences"]["frames"]))  # padded as TF pads
    for key, lengths in expected["lengths"].items():
        assert torch.equal(batch["_lengths"][key], _dense(lengths)), key
    words = [base64.b64decode(b) for b in expected["sequences"]["words"]["bytes"]]
    width = expected["sequences"]["words"]["shape"][1]
    assert batch["words"] == [
        words[i * width : i * width + n] for i, n in enumerate(batch["_lengths"]["words"].tolist())
    ]
    steps: dict[tuple[int, int], list[int]] = {}
    ids = expected["sequences"]["ids"]
    for (b, t, _), value in zip(ids["indices"], ids["values"]["values"]):
        steps.setdefault((b, t), []).append(value)
    for b, ragged in enumerate(batch["ids"]):  # VarLen: TF's 3-D sparse, ours a Ragged per record
        assert ragged.tolist() == [steps.get((b, t), []) for t in range(len(ragged))]


@pytest.mark.parametrize("source", ["written", "inferred"])
def test_sequence_samples_collate_with_two_workers(source: str) -> None:
    expected = _tf_results()
    loader = DataLoader(_sequences(source, shuffle=False), batch_size=3, num_workers=2, collate_fn=tt.collate)
    (batch,) = loader
    frames = _dense(expected["sequences"]["frames"])
    assert isinstance(batch["frames"], tt.Ragged)  # samples keep their own steps; collate makes a Ragged
    assert torch.equal(batch["frames"].to_padded(0.0), frames)
    for key, lengths in expected["lengths"].items():
        assert torch.equal(batch["_lengths"][key], _dense(lengths)), key
    sample = tt.IndexedTFRecordDataset(EXAMPLES / "sequences.tfrecord", **_specs(source))[1]
    assert sample["id"] == b"second" and sample["frames"].tolist() == [[-1.0, -2.0, -3.0]]
    assert sample["words"] == [] and sample["ids"].tolist() == [[4, 5, 6]]
    assert {k: int(v) for k, v in sample["_lengths"].items()} == {"frames": 1, "words": 0, "ids": 1}


def test_sequence_spec_errors() -> None:
    with pytest.raises(SpecError, match="key 'id' is both a context key and a sequence key"):
        _sequences_with(context_spec={"id": "bytes"}, sequence_spec={"id": tt.VarLen(torch.int64)})
    with pytest.raises(ValueError, match="give one or the other"):
        _sequences_with(spec={"id": "bytes"}, sequence_spec=SEQUENCE_SPEC)
    with pytest.raises(SpecError, match="'frames': use FixedLenSequence or VarLen"):
        _sequences_with(sequence_spec={"frames": tt.FixedLen((3,), torch.float32)})
    with pytest.raises(ValueError, match="'_lengths' is reserved"):
        _sequences_with(context_spec={"_lengths": "int"}, sequence_spec=SEQUENCE_SPEC)
    with pytest.raises(SpecError, match="must be 'raw'"):
        _sequences_with(spec="bytes")


def _sequences_with(**kwargs: Any) -> tt.IndexedTFRecordDataset:
    return tt.IndexedTFRecordDataset(EXAMPLES / "sequences.tfrecord", **kwargs)


def test_damaged_sequence_example_is_skipped(tmp_path: Path) -> None:
    good = tt.encode_sequence_example({"id": [b"a"], "length": [1]}, {"frames": [[1.0, 2.0, 3.0]]})
    path = tmp_path / "seq.tfrecord"
    path.write_bytes(encode_record(good) + encode_record(b"\x0a\x05\x0a\x03") + encode_record(good))
    spec = {"context_spec": CONTEXT_SPEC, "sequence_spec": {"frames": SEQUENCE_SPEC["frames"]}}
    with pytest.raises(tt.TFRecordError, match="record 1 of"):
        list(tt.TFRecordDataset(path, batch_size=3, shuffle=False, **spec))  # type: ignore[arg-type]
    ds = tt.TFRecordDataset(path, batch_size=3, shuffle=False, on_error="skip", **spec)  # type: ignore[arg-type]
    (batch,) = ds
    assert batch["_padding"].tolist() == [False, True, False]
    assert batch["_lengths"]["frames"].tolist() == [1, 1, 1]


@pytest.mark.parametrize("shuffle", [False, "shards", "global", "block:4"])
def test_payloads_over_plain_gzip_and_zlib_shards(tmp_path: Path, shuffle: Any) -> None:
    """Raw and SequenceExample datasets over a mix of plain, GZIP and ZLIB shards of uneven sizes,
    2 workers: every record once, each with its own contents, in every shuffle mode."""
    pytest.importorskip("rapidgzip")
    record_id = 0
    for shard, (size, compression) in enumerate([(5, None), (9, "gzip"), (3, "zlib"), (6, "gzip")]):
        suffix = ".gz" if compression == "gzip" else ""
        with tt.RecordWriter(tmp_path / f"part-{shard}.tfrecord{suffix}", compression=compression) as writer:
            for _ in range(size):
                steps = [[float(record_id)] * 2] * (record_id % 3)
                writer.write(tt.encode_sequence_example({"id": [record_id]}, {"xy": steps}))
                record_id += 1

    def raw_ids(batch: dict[str, Any]) -> list[int]:
        return [int(tt.decode_sequence_example(r, {"id": "int"}, {})[0]["id"]) for r in batch["record"]]

    def sequence_ids(batch: dict[str, Any]) -> list[int]:
        for row, steps, i in zip(batch["xy"], batch["_lengths"]["xy"].tolist(), batch["id"].tolist()):
            assert steps == i % 3 and row[:steps].flatten().tolist() == [float(i)] * 2 * steps
        return batch["id"].tolist()  # type: ignore[no-any-return]

    proposed = dict(tt.infer_spec(tmp_path))  # read through the compressed shards too
    kinds = {"raw": ({"spec": "raw"}, raw_ids), "sequence": (proposed, sequence_ids)}
    for arguments, contents in kinds.values():
        ds = tt.TFRecordDataset(tmp_path, batch_size=4, shuffle=shuffle, seed=1, drop_last=False, **arguments)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
        ids = [
            i for b in batches for i, pad in zip(b["_record_id"].tolist(), b["_padding"].tolist()) if not pad
        ]
        assert sorted(ids) == list(range(23))  # exactly once
        assert all(contents(b) == b["_record_id"].tolist() for b in batches)  # each record its own
        if shuffle in (False, "global"):
            assert (ids == sorted(ids)) == (shuffle is False)  # file order; else a permutation
