"""tt.ray against a real local Ray cluster (2 CPUs, 127.0.0.1 only), shared by the module.

Reads are compared with our own decoder and with what TensorFlow parsed from its golden file;
writes are read back, checked against their indexes, and written twice for the same names and
bytes; a write task SIGKILLed mid-write leaves nothing under a final name; S3 runs on a moto
server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import DATA
from remote_servers import moto_server, s3_options

import torch_tfrecord as tt

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from torch_tfrecord.integrations.ray import TFRecordDatasource, read_tfrecords, write_tfrecords  # noqa: E402
from torch_tfrecord.integrations.ray.datasource import plan_runs  # noqa: E402

N = 600
SPEC = {
    "id": tt.FixedLen((), torch.int64),
    "x": tt.FixedLen((3,), torch.float32),
    "m": tt.FixedLen((2, 3), torch.int32),
    "tokens": tt.VarLen(torch.int64),
    "w": "float",
    "name": tt.FixedLen((), str),
    "blobs": tt.VarLen(bytes),
    "steps": tt.FixedLenSequence((2,), torch.float32, allow_missing=True),
}


def _features(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "x": [i, -i, i / 7],
        "m": [i + k for k in range(6)],
        "tokens": list(range(i % 5)),
        "w": [i / 2] * (i % 3),
        "name": f"n{i}",
        "blobs": [bytes([i % 251]) * (i % 4)] * (i % 3),
        "steps": [float(i)] * (2 * (i % 3)),
    }


def _plain(value: Any) -> Any:
    """Nested Python lists / scalars of a value from Ray rows or from our decoder."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value] if value.dtype == object else value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decoded_rows(paths: list[str], spec: Any) -> list[dict[str, Any]]:
    """Every record of the files, decoded by our own decoder, as plain rows."""
    rows = []
    for path in paths:
        records = list(tt.read_records(path))
        columns = tt.decode_batch(records, spec)
        for i in range(len(records)):
            rows.append({key: _plain(column[i]) for key, column in columns.items()})
    return rows


def _ray_rows(dataset: Any) -> list[dict[str, Any]]:
    return [{key: _plain(value) for key, value in row.items()} for row in dataset.iter_rows()]


def _by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: row["id"])


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    prefix = tmp_path_factory.mktemp("shards") / "train"
    with tt.ShardedExampleWriter(prefix, max_records=250) as writer:  # 250, 250, 100 records
        for i in range(N):
            writer.write(_features(i))
    return writer.shard_paths


# Planning (no cluster) -------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7, 50, 1000])
def test_plan_runs_cover_every_record_once_in_about_equal_bytes(parallelism: int) -> None:
    sizes = np.random.default_rng(parallelism).integers(16, 5000, size=300)
    runs = plan_runs(sizes, parallelism)
    assert runs[0][0] == 0 and runs[-1][1] == len(sizes)
    assert all(a < b for a, b in runs) and all(runs[i][1] == runs[i + 1][0] for i in range(len(runs) - 1))
    assert len(runs) <= min(parallelism, len(sizes))
    if parallelism <= 7:
        assert len(runs) == parallelism
        run_bytes = [int(sizes[a:b].sum()) for a, b in runs]
        assert max(run_bytes) - min(run_bytes) <= 2 * sizes.max()  # at most a record either side
    assert plan_runs([], 4) == []
    with pytest.raises(ValueError, match="parallelism"):
        plan_runs(sizes, 0)


def test_read_tasks_know_their_rows_and_bytes_before_running(shards: list[str]) -> None:
    source = TFRecordDatasource(shards, spec=SPEC, min_task_bytes=0)
    assert source.num_records == N
    tasks = source.get_read_tasks(4)
    assert len(tasks) == 4
    assert sum(task.metadata.num_rows for task in tasks) == N
    assert sum(task.metadata.size_bytes for task in tasks) == sum(os.path.getsize(p) for p in shards)
    ids = []
    for task in tasks:  # run in this process: each gives exactly the rows it announced
        blocks = list(task())
        assert sum(block.num_rows for block in blocks) == task.metadata.num_rows
        ids.extend(i for block in blocks for i in block.column("id").to_pylist())
    assert ids == list(range(N))  # runs of consecutive records, in file order


def test_tasks_read_at_least_min_task_bytes(shards: list[str]) -> None:
    total = sum(os.path.getsize(p) for p in shards)
    source = TFRecordDatasource(shards, spec=SPEC, min_task_bytes=total // 3 + 1)
    tasks = source.get_read_tasks(200)  # Ray's default for small data
    assert len(tasks) == 3 and sum(task.metadata.num_rows for task in tasks) == N
    assert len(TFRecordDatasource(shards, spec=SPEC).get_read_tasks(200)) == 1  # well under 8 MiB


def test_a_file_without_index_is_one_task_with_unknown_rows(shards: list[str], tmp_path: Path) -> None:
    copy = tmp_path / "noindex.tfrecord"
    shutil.copyfile(shards[2], copy)
    source = TFRecordDatasource([shards[0], str(copy)], spec=SPEC, min_task_bytes=0)
    assert source.num_records is None
    tasks = source.get_read_tasks(5)
    assert [task.metadata.num_rows for task in tasks][-1] is None
    assert sum(task.metadata.num_rows or 0 for task in tasks) == 250
    assert sum(block.num_rows for block in tasks[-1]()) == 100


def test_a_stale_index_is_refused_when_the_dataset_is_made(shards: list[str], tmp_path: Path) -> None:
    copy = tmp_path / "stale.tfrecord"
    shutil.copyfile(shards[0], copy)
    shutil.copyfile(shards[1] + ".idx", str(copy) + ".idx")
    Path(copy).write_bytes(Path(copy).read_bytes() + Path(shards[2]).read_bytes()[:40])
    with pytest.raises(tt.StaleIndexError, match="stale.tfrecord"):
        TFRecordDatasource(str(copy), spec=SPEC)


def test_without_ray_the_error_names_the_extra() -> None:
    code = "import sys; sys.modules['ray'] = None\nimport torch_tfrecord as tt\ntt.ray"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "install the 'ray' extra" in result.stderr


# Reading through the cluster ---------------------------------------------------------------------


def test_read_equals_our_decoder(cluster: None, shards: list[str]) -> None:
    dataset = read_tfrecords(shards, spec=SPEC, override_num_blocks=4)
    schema = dataset.schema()
    assert str(schema.base_schema.field("id").type) == "int64"
    assert "shape=(2, 3)" in str(schema.base_schema.field("m").type)
    assert str(schema.base_schema.field("name").type) == "string"
    assert str(schema.base_schema.field("blobs").type) == "list<item: binary>"
    assert _by_id(_ray_rows(dataset)) == _decoded_rows(shards, SPEC)
    batches = dataset.select_columns(["id", "x", "m"]).iter_torch_batches(batch_size=256)
    seen = 0
    for batch in batches:
        assert batch["m"].dtype == torch.int32 and batch["m"].shape[1:] == (2, 3)
        assert torch.equal(batch["x"][:, 0], batch["id"].float())
        seen += len(batch["id"])
    assert seen == N


def test_spec_none_reads_every_feature_as_a_list(cluster: None, shards: list[str]) -> None:
    dataset = read_tfrecords(shards, override_num_blocks=3)
    rows = _by_id([{**row, "id": row["id"][0]} for row in _ray_rows(dataset)])
    expected = _decoded_rows(shards, None)
    assert len(rows) == N
    for row, want in zip(rows, expected, strict=True):
        assert set(row) == set(want) | {"steps", "tokens", "w", "blobs"}  # keys absent here: []
        assert row["x"] == want["x"] and row["name"] == want["name"] and row["id"] == want["id"][0]
        assert row["tokens"] == want.get("tokens", [])


def _tensorflow_examples() -> dict[str, Any]:
    """What tf.io.parse_example gave for tests/data/examples/examples.tfrecord, per feature."""
    parsed = json.loads((DATA / "examples" / "expected.json").read_text())["examples"]
    out: dict[str, Any] = {}
    for key, value in parsed.items():
        if "dense_shape" in value:  # sparse: rows of values
            rows: list[list[Any]] = [[] for _ in range(value["dense_shape"][0])]
            values = value["values"]
            flat = [base64.b64decode(v) for v in values["bytes"]] if "bytes" in values else values["values"]
            for (row, _), item in zip(value["indices"], flat, strict=True):
                rows[row].append(item)
            out[key] = rows
        else:
            out[key] = np.array(value["values"], dtype=value["dtype"]).reshape(value["shape"]).tolist()
    return out


GOLDEN_SPEC = {
    "label": tt.FixedLen((), torch.int64, default=-1),
    "neg": tt.FixedLen((2,), torch.int64),
    "score": tt.FixedLen((3,), torch.float32),
    "tokens": tt.VarLen(torch.int64),
    "names": tt.VarLen(bytes),
    "weights": tt.VarLen(torch.float32),
    "seq": tt.FixedLenSequence((2,), torch.float32, allow_missing=True),
}


@pytest.mark.parametrize("compressed", [False, True])
def test_tensorflow_written_examples_read_as_tensorflow_parses_them(
    cluster: None, tmp_path: Path, compressed: bool
) -> None:
    source = DATA / "examples" / "examples.tfrecord"
    path = tmp_path / ("examples.tfrecord.gz" if compressed else "examples.tfrecord")
    path.write_bytes(gzip.compress(source.read_bytes()) if compressed else source.read_bytes())
    if not compressed:
        tt.save_index(tt.build_index(path), tt.default_index_path(path))
    rows = _ray_rows(read_tfrecords(str(path), spec=GOLDEN_SPEC))  # one task: in file order
    assert len(rows) == 4
    for key, want in _tensorflow_examples().items():
        got = [row[key] for row in rows]
        if key == "seq":  # TF pads the batch to its longest sequence; the rows here are ragged
            want = [[step for step in record if step != [0.0, 0.0]] for record in want]
        assert got == want, key
    assert rows == _decoded_rows([str(path)], GOLDEN_SPEC)


def test_images_are_decoded_when_the_spec_says_image(cluster: None, tmp_path: Path) -> None:
    from PIL import Image as PILImage

    path = tmp_path / "images.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for i in range(6):
            pixels = np.random.default_rng(i).integers(0, 256, size=(4 + i, 5, 3), dtype=np.uint8)
            with open(tmp_path / "one.png", "wb") as f:
                PILImage.fromarray(pixels).save(f, format="PNG")
            writer.write({"id": i, "image": tt.BytesList([(tmp_path / "one.png").read_bytes()])})
    spec = {"id": tt.FixedLen((), torch.int64), "image": tt.Image()}
    rows = _by_id(_ray_rows(read_tfrecords(str(path), spec=spec, override_num_blocks=2)))
    assert [np.asarray(row["image"]).shape for row in rows] == [(3, 4 + i, 5) for i in range(6)]
    assert rows == _decoded_rows([str(path)], spec)


def _damage(path: str, record: int, directory: Path) -> str:
    """A copy of ``path`` (and its index) with a payload byte of ``record`` flipped."""
    copy = directory / os.path.basename(path)
    shutil.copyfile(path, copy)
    shutil.copyfile(path + ".idx", str(copy) + ".idx")
    offset = int(tt.load_index(str(copy) + ".idx")[record, 0]) + 12 + 3
    data = bytearray(copy.read_bytes())
    data[offset] ^= 0xFF
    copy.write_bytes(bytes(data))
    return str(copy)


@pytest.mark.parametrize("indexed", [True, False])
def test_a_damaged_record_raises_naming_file_and_record_or_is_skipped(
    cluster: None, shards: list[str], tmp_path: Path, indexed: bool
) -> None:
    damaged = _damage(shards[1], 17, tmp_path)
    if not indexed:
        os.remove(damaged + ".idx")
    with pytest.raises(Exception, match=r"(?s)CRC mismatch.*train-00001-of-00003.*record 17"):
        read_tfrecords(damaged, spec=SPEC).materialize()
    ids = sorted(row["id"] for row in read_tfrecords(damaged, spec=SPEC, on_error="skip").iter_rows())
    # By index, only that record is left out; front to back, the rest of the file with it.
    assert ids == [i for i in range(250, 500) if i != 267] if indexed else list(range(250, 267))


def test_raw_records_are_each_records_bytes_crc_checked(
    cluster: None, shards: list[str], tmp_path: Path
) -> None:
    rows = list(read_tfrecords(shards, spec="raw", override_num_blocks=1).iter_rows())  # one task: in order
    assert [row["record"] for row in rows] == [r for path in shards for r in tt.read_records(path)]
    damaged = _damage(shards[1], 17, tmp_path)
    with pytest.raises(Exception, match=r"(?s)CRC mismatch.*train-00001-of-00003.*record 17"):
        read_tfrecords(damaged, spec="raw").materialize()
    kept = [row["record"] for row in read_tfrecords(damaged, spec="raw", on_error="skip").iter_rows()]
    assert kept == [r for i, r in enumerate(tt.read_records(shards[1])) if i != 17]


SEQUENCE_CONTEXT = {"id": tt.FixedLen((), bytes), "length": tt.FixedLen((), torch.int64)}
SEQUENCE_LISTS = {
    "frames": tt.FixedLenSequence((3,), torch.float32),
    "words": tt.FixedLenSequence((), bytes, allow_missing=True),
    "ids": tt.VarLen(torch.int64),
}


@pytest.mark.parametrize("compressed", [False, True])
def test_tensorflow_written_sequence_examples_read_as_the_dataset_gives_them(
    cluster: None, tmp_path: Path, compressed: bool
) -> None:
    source = DATA / "examples" / "sequences.tfrecord"  # written by TensorFlow (make_examples_golden.py)
    path = tmp_path / ("sequences.tfrecord.gz" if compressed else "sequences.tfrecord")
    path.write_bytes(gzip.compress(source.read_bytes()) if compressed else source.read_bytes())
    if not compressed:
        tt.save_index(tt.build_index(path), tt.default_index_path(path))
    specs = {"context_spec": SEQUENCE_CONTEXT, "sequence_spec": SEQUENCE_LISTS}
    dataset = read_tfrecords(str(path), override_num_blocks=2, **specs)
    assert (
        str(dataset.schema().base_schema.field("frames").type)
        == "list<item: fixed_size_list<item: float>[3]>"
    )
    rows = _ray_rows(dataset)
    want = []
    for sample in tt.TFRecordDataset(source, shuffle=False, **specs):
        want.append({key: _plain(sample[key].tolist() if key == "ids" else sample[key]) for key in rows[0]})
    rows = sorted(rows, key=lambda row: row["id"])  # b"first", b"second", b"third"
    assert rows == sorted(want, key=lambda row: row["id"])
    assert [len(row["frames"]) for row in rows] == [3, 1, 0]  # each row's own steps, unpadded


def test_spec_with_sequence_spec_is_the_datasets_error(shards: list[str]) -> None:
    with pytest.raises(ValueError, match="give one or the other") as ours:
        read_tfrecords(shards, spec=SPEC, sequence_spec=SEQUENCE_LISTS)
    with pytest.raises(ValueError) as theirs:
        tt.TFRecordDataset(shards, spec=SPEC, sequence_spec=SEQUENCE_LISTS)
    assert str(ours.value) == str(theirs.value)


# Writing -------------------------------------------------------------------------------------------


def test_round_trip_with_num_shards(cluster: None, shards: list[str], tmp_path: Path) -> None:
    dataset = read_tfrecords(shards, spec=SPEC, override_num_blocks=2)
    paths = write_tfrecords(dataset, tmp_path / "out" / "part", num_shards=4)
    assert [os.path.basename(p) for p in paths] == [f"part-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        [name for p in paths for name in (os.path.basename(p), os.path.basename(p) + ".idx")]
        + ["part.manifest.json", "part.manifest.tables.npz"]  # the dataset's manifest
    )
    for path in paths:
        tt.load_index(path + ".idx", data_path=path)  # the index describes the file
    assert _by_id(_decoded_rows(paths, SPEC)) == _decoded_rows(shards, SPEC)
    again = read_tfrecords(str(tmp_path / "out"), spec=SPEC)
    assert again.count() == N


def test_column_types_become_feature_types_and_compressed_shards(cluster: None, tmp_path: Path) -> None:
    items = [
        {
            "id": i,
            "flag": i % 2 == 0,
            "score": i / 4,
            "text": f"t{i}",
            "raw": bytes([i]),
            "values": [i, i + 1],
            "vector": np.full((2, 2), i, dtype=np.float32),
            "maybe": None if i % 3 else i,
        }
        for i in range(40)
    ]
    dataset = ray.data.from_items(items)
    paths = write_tfrecords(dataset, tmp_path / "typed", max_records_per_shard=15, compression="gzip")
    assert all(p.endswith(".tfrecord.gz") for p in paths) and len(paths) >= 3
    assert not any(name.endswith(".idx") for name in os.listdir(tmp_path))
    records = [r for p in paths for r in tt.read_records(p)]
    spec = {
        "id": tt.FixedLen((), torch.int64),
        "flag": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((), torch.float32),
        "text": tt.FixedLen((), str),
        "raw": tt.FixedLen((), bytes),
        "values": tt.FixedLen((2,), torch.int64),
        "vector": tt.FixedLen((2, 2), torch.float32),
        "maybe": tt.VarLen(torch.int64),
    }
    columns = tt.decode_batch(records, spec)
    order = columns["id"].argsort().tolist()
    assert columns["id"][order].tolist() == list(range(40))
    assert columns["flag"][order].tolist() == [int(i % 2 == 0) for i in range(40)]
    assert columns["score"][order].tolist() == [i / 4 for i in range(40)]
    assert [columns["text"][i] for i in order] == [f"t{i}" for i in range(40)]
    assert [columns["raw"][i] for i in order] == [bytes([i]) for i in range(40)]
    assert columns["vector"][order][:, 1, 1].tolist() == list(range(40))
    assert [columns["maybe"][i].tolist() for i in order] == [[] if i % 3 else [i] for i in range(40)]
    back = read_tfrecords(paths, spec=spec)  # compressed: a task per file
    assert sorted(row["id"] for row in back.iter_rows()) == list(range(40))


def test_a_uint8_tensor_column_is_refused_naming_it(cluster: None, tmp_path: Path) -> None:
    dataset = ray.data.from_items([{"image": np.zeros((2, 2), np.uint8)}])
    with pytest.raises(Exception, match="'image'.*ambiguous"):
        write_tfrecords(dataset, tmp_path / "bad")
    assert [name for name in os.listdir(tmp_path) if "bad" in name] == []  # no shard, no leftover


def test_shard_names_and_bytes_do_not_depend_on_scheduling(
    cluster: None, shards: list[str], tmp_path: Path
) -> None:
    context = ray.data.DataContext.get_current()
    keep = context.execution_options.preserve_order
    context.execution_options.preserve_order = True
    try:
        outputs = []
        for run, concurrency in enumerate([1, 2]):
            dataset = read_tfrecords(shards, spec=SPEC, override_num_blocks=3)
            paths = write_tfrecords(dataset, tmp_path / f"run{run}" / "part", concurrency=concurrency)
            outputs.append([(os.path.basename(p), Path(p).read_bytes()) for p in paths])
    finally:
        context.execution_options.preserve_order = keep
    assert [name for name, _ in outputs[0]] == [f"part-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert outputs[0] == outputs[1]
    # With the order preserved, the shards in name order hold the records in order.
    assert _decoded_rows(paths, SPEC) == _decoded_rows(shards, SPEC)


def test_a_write_task_killed_mid_write_leaves_no_partial_shard(
    cluster: None, shards: list[str], tmp_path: Path
) -> None:
    from torch_tfrecord.integrations.ray import TFRecordDatasink

    marker = tmp_path / "killed-once"
    out = tmp_path / "out"

    class KilledOnce(TFRecordDatasink):
        """Its first write task dies (SIGKILL) after writing its first block's records."""

        def write(self, blocks: Any, ctx: Any) -> Any:
            def blocks_then_death() -> Iterator[Any]:
                for number, block in enumerate(blocks):
                    yield block
                    if number == 0:
                        try:
                            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                        except FileExistsError:
                            continue
                        names = os.listdir(out)
                        assert any(".tmp-" in name for name in names), names  # mid-write
                        os.kill(os.getpid(), signal.SIGKILL)

            return super().write(blocks_then_death(), ctx)

    dataset = read_tfrecords(shards, spec=SPEC, override_num_blocks=2)
    dataset = dataset.map_batches(lambda batch: batch, batch_size=100)  # blocks of 100 rows
    sink = KilledOnce(out / "part", num_shards=2)
    dataset.repartition(2).write_datasink(sink)
    assert marker.exists()  # a task was killed, and retried
    assert sorted(os.listdir(out)) == sorted(
        [name for p in sink.shard_paths for name in (os.path.basename(p), os.path.basename(p) + ".idx")]
        + ["part.manifest.json", "part.manifest.tables.npz"]
    )
    assert _by_id(_decoded_rows(sink.shard_paths, SPEC)) == _decoded_rows(shards, SPEC)


# Remote ---------------------------------------------------------------------------------------------


def test_s3_round_trip(cluster: None, shards: list[str]) -> None:
    pytest.importorskip("s3fs")
    import fsspec

    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fsspec.filesystem("s3", **options).mkdir("bucket")
        local = read_tfrecords(shards, spec=SPEC, override_num_blocks=3)
        paths = write_tfrecords(local, "s3://bucket/data/train", num_shards=2, storage_options=options)
        assert paths == [f"s3://bucket/data/train-{i:05d}-of-00002.tfrecord" for i in range(2)]
        listed = sorted(fsspec.filesystem("s3", **options).ls("bucket/data", detail=False, refresh=True))
        assert [p.rsplit("/", 1)[1] for p in listed] == sorted(
            [name for p in paths for name in (p.rsplit("/", 1)[1], p.rsplit("/", 1)[1] + ".idx")]
            + ["train.manifest.json", "train.manifest.tables.npz"]
        )
        dataset = read_tfrecords(
            "s3://bucket/data/", spec=SPEC, storage_options=options, override_num_blocks=4
        )
        assert dataset.count() == N
        assert _by_id(_ray_rows(dataset)) == _decoded_rows(shards, SPEC)
