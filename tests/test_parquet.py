"""tt.to_parquet / tt.from_parquet: TFRecord -> Parquet -> TFRecord gives the same Examples."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.convert import ConversionError
from torch_tfrecord.errors import FeatureError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

_DTYPES = [torch.int64, torch.int32, torch.bool, torch.float32, torch.float64, bytes, str]


@st.composite
def features(draw: st.DrawFn) -> tuple[object, st.SearchStrategy[object]]:
    """A feature spec and a strategy for the values of one record (as encode_example takes them)."""
    dtype = draw(st.sampled_from(_DTYPES))
    text = dtype in (bytes, str)
    shape: tuple[int, ...] | None = draw(
        st.sampled_from([None, (), (3,)] if text else [None, (), (2,), (2, 3), (1, 2, 2)])
    )
    if dtype is bytes:
        element: st.SearchStrategy[object] = st.binary(max_size=8)
    elif dtype is str:
        element = st.text(max_size=5)
    elif dtype is torch.bool:
        element = st.integers(0, 1)
    elif dtype is torch.int32:
        element = st.integers(-(2**31), 2**31 - 1)
    elif dtype is torch.int64:
        element = st.integers(-(2**63), 2**63 - 1)
    else:
        element = st.floats(width=32, allow_nan=False)
    spec = tt.VarLen(dtype) if shape is None else tt.FixedLen(shape, dtype)
    count = st.integers(0, 4) if shape is None else st.just(int(np.prod(shape)))
    kind = (
        tt.BytesList
        if text
        else tt.Int64List
        if dtype in (torch.int64, torch.int32, torch.bool)
        else tt.FloatList
    )
    return spec, count.flatmap(lambda n: st.lists(element, min_size=n, max_size=n).map(kind))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=st.dictionaries(
        st.from_regex(r"[a-z]{1,3}(/[a-z]{1,2})?", fullmatch=True), features(), min_size=1, max_size=5
    ),
    rows=st.integers(0, 12),
    data=st.data(),
)
def test_round_trip_gives_the_same_examples(
    tmp_path_factory: pytest.TempPathFactory, specs, rows, data
) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("rt")
    spec = {key: feature for key, (feature, _) in specs.items()}
    records = [
        tt.encode_example({key: data.draw(values) for key, (_, values) in specs.items()}) for _ in range(rows)
    ]
    with tt.RecordWriter(str(tmp / "in.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    files = tt.to_parquet(str(tmp / "in.tfrecord"), str(tmp / "out.parquet"), spec=spec, batch_size=5)
    assert pq.read_metadata(files[0]).num_rows == rows
    result = tt.from_parquet(files, str(tmp / "back"), shard_size=7)
    back = [r for path in result.shards[""] for r in tt.read_records(path)]
    assert back == records  # byte for byte: same keys, same list types, same values
    assert result.spec == spec


def test_columns_are_plain_arrow_types(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "a.tfrecord")
    with tt.ExampleWriter(path) as writer:
        for i in range(3):
            writer.write(
            {"x": np.arange(6, dtype=np.float32) + i, "label": i, "name": f"n{i}", "ids": list(range(i)),
             "image": tt.BytesList([b"\x89PNG fake"])}
        )  # fmt: skip
    spec = {"x": tt.FixedLen((2, 3), torch.float32), "label": tt.FixedLen((), torch.int64),
            "name": tt.FixedLen((), str), "ids": tt.VarLen(torch.int64), "image": tt.Image()}  # fmt: skip
    (out,) = tt.to_parquet(path, os.path.join(tmp_path, "a.parquet"), spec=spec)
    table = pq.read_table(out)
    assert table.schema.field("x").type == pa.list_(pa.list_(pa.float32(), 3), 2)
    assert table.schema.field("label").type == pa.int64()
    assert table.schema.field("name").type == pa.string()
    assert table.schema.field("ids").type == pa.list_(pa.int64())
    assert table.schema.field("image").type == pa.binary()  # the stored bytes, not decoded
    assert table.to_pylist()[2] == {"x": [[2, 3, 4], [5, 6, 7]], "label": 2, "name": "n2", "ids": [0, 1],
                                    "image": b"\x89PNG fake"}  # fmt: skip
    back = tt.from_parquet(out, os.path.join(tmp_path, "back"))
    assert back.spec == spec  # the metadata's spec, Image included, saved as spec.json
    assert tt.IndexedTFRecordDataset(os.path.join(tmp_path, "back"))._decoder.feature_spec == spec


def test_sequence_examples_as_lists_of_lists(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "s.tfrecord")
    records = [
        tt.encode_sequence_example(
            {"id": [i]}, {"frames": [[1.0 * i, 2.0]] * i, "words": [[b"a"], [b"b", b"c"]]}
        )
        for i in range(4)
    ]
    with tt.RecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    (out,) = tt.to_parquet(path, os.path.join(tmp_path, "s.parquet"))  # spec inferred
    table = pq.read_table(out)
    assert table.column("frames").to_pylist()[2] == [[2.0, 2.0], [2.0, 2.0]]
    assert table.column("words").to_pylist()[1] == [[b"a"], [b"b", b"c"]]
    back = tt.from_parquet(out, os.path.join(tmp_path, "back"))
    assert [r for p in back.shards[""] for r in tt.read_records(p)] == records


def test_rows_per_file_and_no_half_written_file(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "a.tfrecord")
    with tt.ExampleWriter(path) as writer:
        for i in range(10):
            writer.write({"a": i} if i != 7 else {"a": "seven"})
    out = os.path.join(tmp_path, "parts")
    with pytest.raises(FeatureError, match="'a'.*record 7"):
        tt.to_parquet(path, out, spec={"a": tt.FixedLen((), torch.int64)}, rows_per_file=2, batch_size=2)
    assert not os.path.exists(out) or os.listdir(out) == []
    with tt.ExampleWriter(path) as writer:
        for i in range(10):
            writer.write({"a": i})
    files = tt.to_parquet(path, out, spec={"a": "int"}, rows_per_file=4, batch_size=2)
    assert [os.path.basename(f) for f in files] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert sum(pq.read_metadata(f).num_rows for f in files) == 10


def test_foreign_parquet_files(tmp_path: str) -> None:
    table = pa.table({
        "a": pa.array([1, 2, None]), "s": ["x", "y", "z"],
        "l": pa.array([[1.0], [], [2.0, 3.0]], pa.list_(pa.float32())),
        "st": pa.array([{"p": 1, "q": "a"}] * 3), "v": pa.array([[1, 2]] * 3, pa.list_(pa.int16(), 2)),
    })  # fmt: skip
    pq.write_table(table, os.path.join(tmp_path, "f.parquet"))
    result = tt.from_parquet(os.path.join(tmp_path, "f.parquet"), os.path.join(tmp_path, "out"))
    assert result.spec == {
        "a": tt.VarLen(torch.int64), "s": tt.FixedLen((), str), "l": tt.VarLen(torch.float32),
        "st/p": tt.FixedLen((), torch.int64), "st/q": tt.FixedLen((), str),
        "v": tt.FixedLen((2,), torch.int16),
    }  # fmt: skip
    dataset = tt.IndexedTFRecordDataset(os.path.join(tmp_path, "out"))
    assert dataset[2]["a"].tolist() == [] and dataset[1]["a"].tolist() == [2]
    assert dataset[2]["l"].tolist() == [2.0, 3.0] and dataset[0]["st/q"] == "a"


def test_bad_parquet_values_name_file_row_and_column(tmp_path: str) -> None:
    maps = pa.array([{"k": 1}, {"k": 2}], pa.map_(pa.string(), pa.int64()))
    pq.write_table(pa.table({"ok": [1, 2], "m": maps}), os.path.join(tmp_path, "bad.parquet"))
    with pytest.raises(ConversionError, match="column 'm'.*fit no feature type"):
        tt.from_parquet(os.path.join(tmp_path, "bad.parquet"), os.path.join(tmp_path, "out"))
    assert (
        not os.path.exists(os.path.join(tmp_path, "out")) or os.listdir(os.path.join(tmp_path, "out")) == []
    )
    pq.write_table(
        pa.table({"big": pa.array([1, 2**64 - 1], pa.uint64())}), os.path.join(tmp_path, "big.parquet")
    )
    with pytest.raises(ConversionError, match=r"big.parquet' row 1: feature 'big'.*int64"):
        tt.from_parquet(os.path.join(tmp_path, "big.parquet"), os.path.join(tmp_path, "out"))
    assert [f for f in os.listdir(os.path.join(tmp_path, "out")) if "tfrecord" in f] == []


def test_from_parquet_holds_one_row_group_at_a_time(tmp_path: str) -> None:
    """pyarrow's default pre_buffer keeps every row group read so far: a 2 GB file took 2 GB of
    RSS. Arrow's allocations stay about one row group (100 KB here) through a 20 MB file."""
    from torch_tfrecord.convert.parquet import _records

    rng = np.random.default_rng(0)
    blobs = [rng.integers(0, 256, 1000, dtype=np.uint8).tobytes() for _ in range(20_000)]
    path = os.path.join(tmp_path, "big.parquet")
    pq.write_table(pa.table({"blob": blobs}), path, row_group_size=100, compression="none")
    del blobs
    start, peak = pa.total_allocated_bytes(), 0
    for number, _ in enumerate(_records([path], {})):
        if number % 100 == 0:
            peak = max(peak, pa.total_allocated_bytes() - start)
    assert number == 19_999
    assert peak < 4_000_000, f"{peak:,} bytes held by Arrow while reading"
