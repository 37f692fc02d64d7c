"""IndexedTFRecordDataset.read_batch: any records by index as one decoded batch, and pipelines of
one's own over it (torchdata.nodes, SPDL: the recipes of docs/guides/random-access.md)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.codec.rows import split_batch

pytestmark = pytest.mark.usefixtures("each_reader")

SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float", "name": tt.FixedLen((), bytes)}


def write(folder: Path, sizes: list[int]) -> list[Path]:
    """Shards of Examples: "id" is the record's global id, "x" ``id % 3`` floats, "name" bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, record_id = [], 0
    for shard, size in enumerate(sizes):
        path = folder / f"shard-{shard}.tfrecord"
        with tt.ExampleWriter(path) as writer:
            for _ in range(size):
                writer.write(
                    {"id": record_id, "x": [float(record_id)] * (record_id % 3), "name": b"n%d" % record_id}
                )
                record_id += 1
        paths.append(path)
    return paths


def same(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, tt.Ragged) and isinstance(b, tt.Ragged):
        return same(a.values, b.values) and same(a.offsets, b.offsets)
    return type(a) is type(b) and list(a) == list(b)  # type: ignore[call-overload]


def test_read_batch_is_the_datasets_batch(tmp_path: Path) -> None:
    paths = write(tmp_path, [7, 0, 12])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    # The dataset's shuffled batch, read again by its ids: the same batch.
    whole = next(iter(tt.TFRecordDataset(paths, spec=SPEC, batch_size=19, drop_last=False)))
    assert whole["_record_id"].tolist() != list(range(19))
    assert same(ds.read_batch(whole["_record_id"]), whole)
    order = np.random.default_rng(0).permutation(19)
    batch = ds.read_batch(order)
    assert batch["_record_id"].tolist() == order.tolist()
    assert batch["_padding"].tolist() == [False] * 19
    assert isinstance(batch["x"], tt.Ragged) and isinstance(batch["name"], tt.RowList)
    # Row for row what __getitems__ gives, in the order asked for (repeats and negatives too).
    indices = [18, 0, 3, 3, -1, 11]
    rows = split_batch({k: v for k, v in ds.read_batch(indices).items() if not k.startswith("_")})
    assert all(same(row, sample) for row, sample in zip(rows, ds.__getitems__(indices), strict=True))
    assert same(ds.read_batch(torch.tensor(indices)), ds.read_batch(np.array(indices)))
    assert ds.read_batch([])["id"].shape == (0,)


def test_read_batch_of_raw_payloads_and_of_an_inferred_spec(tmp_path: Path) -> None:
    paths = write(tmp_path, [6, 4])
    raw = tt.IndexedTFRecordDataset(paths, spec="raw").read_batch([7, 2])
    rows = [
        tt.load_index(tt.default_index_path(paths[1]))[1],
        tt.load_index(tt.default_index_path(paths[0]))[2],
    ]
    expected = [*tt.read_records(paths[1], entries=rows[:1]), *tt.read_records(paths[0], entries=rows[1:])]
    assert list(raw["record"]) == expected and raw["_record_id"].tolist() == [7, 2]
    inferred = tt.IndexedTFRecordDataset(paths).read_batch([7, 2])
    assert inferred["id"].values.tolist() == [7, 2] and list(inferred["name"]) == [[b"n7"], [b"n2"]]


def test_read_batch_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    paths = write(tmp_path, [5])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    with pytest.raises(IndexError, match="index 5 out of range for a dataset of 5 records"):
        ds.read_batch([0, 5])
    with pytest.raises(IndexError, match="index -6 out of range"):
        ds.read_batch([-6])
    with pytest.raises(ValueError, match="transform takes samples"):
        tt.IndexedTFRecordDataset(paths, spec=SPEC, transform=lambda s: s).read_batch([0])


def test_read_batch_of_a_selection_names_the_files_records(tmp_path: Path) -> None:
    paths = write(tmp_path, [10, 10])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC, subset=0.5, seed=3)
    batch = ds.read_batch([4, 0, 9])
    assert batch["_record_id"].tolist() == batch["id"].tolist()  # "id" is the file record id
    assert batch["id"].tolist() == [int(s["id"]) for s in ds.__getitems__([4, 0, 9])]


def test_a_damaged_record_names_its_file_and_offset(tmp_path: Path) -> None:
    paths = write(tmp_path, [6])
    table = tt.load_index(tt.default_index_path(paths[0]))
    data = bytearray(paths[0].read_bytes())
    data[int(table[4][0]) + 14] ^= 1
    paths[0].write_bytes(bytes(data))
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    assert ds.read_batch([0, 3])["id"].tolist() == [0, 3]
    with pytest.raises(tt.CorruptRecordError, match=rf"shard-0.tfrecord' at byte {table[4][0]} \(record 4\)"):
        ds.read_batch([0, 4])


def test_read_batch_from_threads_at_once(tmp_path: Path) -> None:
    paths = write(tmp_path, [300, 200])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    batches = np.random.default_rng(1).permutation(500).reshape(20, 25)
    results: dict[int, list[int]] = {}

    def read(first: int) -> None:
        for b in range(first, 20, 4):
            results[b] = ds.read_batch(batches[b])["id"].tolist()

    threads = [threading.Thread(target=read, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[b] for b in range(20)] == batches.tolist()


def test_torchdata_nodes_over_read_batch(tmp_path: Path) -> None:
    nodes = pytest.importorskip("torchdata.nodes")
    from torch.utils.data import BatchSampler, RandomSampler

    ds = tt.IndexedTFRecordDataset(write(tmp_path, [40, 23]), spec=SPEC)

    def sampler() -> BatchSampler:
        return BatchSampler(
            RandomSampler(ds, generator=torch.Generator().manual_seed(0)), 16, drop_last=False
        )

    expected = [list(b) for b in sampler()]
    node = nodes.ParallelMapper(
        nodes.SamplerWrapper(sampler()), map_fn=ds.read_batch, num_workers=2, method="thread"
    )
    batches = list(nodes.Loader(node))
    assert [b["id"].tolist() for b in batches] == expected  # in order, every record once
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(63))


def test_spdl_over_read_batch(tmp_path: Path) -> None:
    pipeline_module = pytest.importorskip("spdl.pipeline")
    ds = tt.IndexedTFRecordDataset(write(tmp_path, [40, 23]), spec=SPEC)
    id_batches = np.random.default_rng(2).permutation(63).reshape(7, 9)
    pipeline = (
        pipeline_module.PipelineBuilder()
        .add_source(id_batches)
        .pipe(ds.read_batch, concurrency=2, output_order="input")
        .add_sink(buffer_size=2)
        .build(num_threads=2)
    )
    with pipeline.auto_stop():
        batches = [batch["id"].tolist() for batch in pipeline]
    assert batches == id_batches.tolist()
