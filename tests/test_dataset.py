"""TFRecordDataset and IndexedTFRecordDataset in one process, with real DataLoader workers.

Multi-rank behaviour is checked here with explicit ``rank=`` / ``world_size=`` (each rank's
dataset built in turn); tests/test_distributed.py runs real gloo process groups.
"""

from __future__ import annotations

import collections
import io
import logging
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, random_split

import torch_tfrecord as tt
from torch_tfrecord.data.epoch.world import resolve_world

SPEC = {"id": tt.FixedLen((), torch.int64), "x": "float"}


def _ids(batches: Iterable[dict[str, Any]]) -> tuple[list[int], list[bool]]:
    ids: list[int] = []
    padding: list[bool] = []
    for batch in batches:
        record_ids = torch.as_tensor(batch["_record_id"]).reshape(-1).tolist()
        assert torch.as_tensor(batch["id"]).reshape(-1).tolist() == record_ids
        ids += record_ids
        padding += torch.as_tensor(batch["_padding"]).reshape(-1).tolist()
    return ids, padding


def _real(ids: list[int], padding: list[bool]) -> list[int]:
    return [i for i, p in zip(ids, padding, strict=True) if not p]


@pytest.mark.parametrize("drop_last", [True, False])
def test_every_record_once_over_4_ranks_x_3_workers(
    id_shards: Callable[..., list[Path]], drop_last: bool
) -> None:
    paths = id_shards([1, 7, 1000])
    seen: collections.Counter[int] = collections.Counter()
    batches = []
    for rank in range(4):
        ds = tt.TFRecordDataset(
            paths, spec=SPEC, batch_size=8, rank=rank, world_size=4, drop_last=drop_last, seed=11
        )
        loader = DataLoader(ds, batch_size=None, num_workers=3)
        rank_batches = list(loader)
        assert all(len(b["_record_id"]) == 8 for b in rank_batches)
        batches.append(len(rank_batches))
        assert len(rank_batches) == len(ds)
        ids, padding = _ids(rank_batches)
        seen.update(_real(ids, padding))
    assert len(set(batches)) == 1
    assert set(seen.values()) == {1}
    if drop_last:
        assert batches[0] == 1008 // 32 and 1008 - len(seen) == 1008 % 32
    else:
        assert batches[0] == -(-1008 // 32) and sorted(seen) == list(range(1008))


def test_sample_mode_with_collate(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([50, 3, 77])
    ds = tt.TFRecordDataset(paths, spec=SPEC, drop_last=False)
    assert len(ds) == 130
    loader = DataLoader(ds, batch_size=16, num_workers=2, collate_fn=tt.collate)
    batches = list(loader)
    x = batches[0]["x"]
    assert isinstance(x, tt.Ragged)
    for row, record_id in zip(x, batches[0]["_record_id"].tolist(), strict=True):
        assert row.tolist() == [float(record_id)] * (record_id % 3)
    ids, padding = _ids(batches)
    assert sorted(ids) == list(range(130)) and not any(padding)


def test_order_is_deterministic_and_the_same_with_any_worker_count(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([40, 33])

    def order(workers: int, epoch: int, seed: int = 3) -> list[int]:
        ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=seed)
        ds.set_epoch(epoch)
        return _ids(DataLoader(ds, batch_size=None, num_workers=workers))[0]

    first = order(0, 0)
    assert first == order(0, 0) == order(1, 0) == order(2, 0)
    other_epoch = order(0, 1)
    assert first != other_epoch and len(first) == len(other_epoch) == 72  # 73 records, 1 dropped
    assert first != order(0, 0, seed=4)
    assert first != sorted(first)  # shuffled


def test_set_epoch_reaches_persistent_workers(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([30, 30])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        orders.append(_ids(loader)[0])
    reference = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5)
    for epoch, seen in enumerate(orders):
        reference.set_epoch(epoch)
        assert seen == _ids(reference)[0]
    assert len({tuple(o) for o in orders}) == 3


@pytest.mark.parametrize("resume_workers", [0, 2])
def test_resume_mid_epoch_in_process_then_with_workers(
    id_shards: Callable[..., list[Path]], resume_workers: int
) -> None:
    paths = id_shards([25, 1, 40])
    make = lambda: tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=9)  # noqa: E731
    full = make()
    full.set_epoch(2)
    everything = _ids(full)[0]

    ds = make()
    ds.set_epoch(2)
    taken = []
    for step, batch in enumerate(ds):
        taken.append(batch)
        if step == 6:
            break
    state = ds.state_dict()
    assert state["epoch"] == 2 and state["start"] == 7

    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    rest = _ids(DataLoader(resumed, batch_size=None, num_workers=resume_workers))[0]
    assert _ids(taken)[0] + rest == everything  # nothing lost, nothing twice, same order
    resumed.set_epoch(3)  # the next epoch starts from its beginning
    assert len(_ids(resumed)[0]) == len(everything)


def test_state_from_steps_taken_through_a_plain_dataloader(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([30, 11])
    make = lambda: tt.TFRecordDataset(paths, spec=SPEC, batch_size=3, seed=2)  # noqa: E731
    ds = make()
    taken = []
    for step, batch in enumerate(DataLoader(ds, batch_size=None, num_workers=2)):
        taken.append(batch)
        if step == 4:
            break
    state = ds.state_dict(consumed=5)
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(DataLoader(resumed, batch_size=None, num_workers=2))
    midway = resumed.state_dict(consumed=2)  # counted from the resumed place
    assert midway["start"] == 7
    assert _ids(taken + rest)[0] == _ids(make())[0]
    with pytest.raises(ValueError, match=r"consumed=99 must be in \[0, 13\]"):
        make().state_dict(consumed=99)


def test_resume_from_stateful_dataloader_with_the_same_workers(id_shards: Callable[..., list[Path]]) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    paths = id_shards([31, 29])
    make = lambda: tt.TFRecordDataset(paths, spec=SPEC, drop_last=False, seed=1)  # noqa: E731
    loader = stateful.StatefulDataLoader(make(), batch_size=5, num_workers=2, collate_fn=tt.collate)
    first = []
    for step, batch in enumerate(loader):
        first.append(batch)
        if step == 4:
            break
    state = loader.state_dict()
    again = stateful.StatefulDataLoader(make(), batch_size=5, num_workers=2, collate_fn=tt.collate)
    again.load_state_dict(state)
    ids = _ids(first)[0] + _ids(again)[0]
    assert sorted(ids) == list(range(60))


@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("new_workers", [0, 1, 3])
def test_resume_stateful_dataloader_state_with_another_worker_count(
    id_shards: Callable[..., list[Path]], batch_size: int | None, new_workers: int
) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    paths = id_shards([200, 7])
    make = lambda: tt.TFRecordDataset(paths, spec=SPEC, batch_size=batch_size, drop_last=False)  # noqa: E731
    loader_args: dict[str, Any] = (
        {"batch_size": None} if batch_size else {"batch_size": 10, "collate_fn": tt.collate}
    )
    loader = stateful.StatefulDataLoader(make(), num_workers=2, **loader_args)
    first = []
    for step, batch in enumerate(loader):
        first.append(batch)
        if step == 8:
            break
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)  # the loader's whole state: worker places are merged
    rest = list(DataLoader(resumed, num_workers=new_workers, **loader_args))
    ids, padding = _ids(first + rest)
    assert sorted(_real(ids, padding)) == list(range(207))
    assert len(ids) == len(set(ids)) + sum(padding)


def test_state_from_another_dataset_or_setting_is_refused(
    id_shards: Callable[..., list[Path]], tmp_path: Path
) -> None:
    paths = id_shards([20, 20])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=1)
    next(iter(ds))
    state = ds.state_dict()
    with pytest.raises(ValueError, match="seed 1, this dataset has 2"):
        tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, seed=1, world_size=2, rank=0).load_state_dict(
            state
        )
    with pytest.raises(ValueError, match="batch_size"):
        tt.TFRecordDataset(paths, spec=SPEC, batch_size=5, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="num_records"):
        tt.TFRecordDataset(paths[:1], spec=SPEC, batch_size=4, seed=1).load_state_dict(state)
    other = id_shards([20, 20], directory=tmp_path / "other")
    with open(other[1], "ab") as f:  # same names and counts, other bytes
        f.write(tt.encode_record(b""))
    (other[1].parent / (other[1].name + ".idx")).unlink()
    with pytest.raises(ValueError, match="data"):
        tt.TFRecordDataset(other, spec=SPEC, batch_size=4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="not a TFRecordDataset state"):
        ds.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="malformed TFRecordDataset state.*start"):
        ds.load_state_dict({key: value for key, value in state.items() if key != "start"})
    with pytest.raises(ValueError, match="malformed StatefulDataLoader state"):
        ds.load_state_dict({"_snapshot": {}})


def _noise(sample: dict[str, Any]) -> dict[str, Any]:
    sample["noise"] = torch.rand(())
    return sample


def _noise_from_generator(sample: dict[str, Any], *, generator: torch.Generator) -> dict[str, Any]:
    sample["noise"] = torch.rand((), generator=generator)
    return sample


@pytest.mark.parametrize("transform", [_noise, _noise_from_generator])
def test_transform_random_numbers_follow_seed_epoch_and_record(
    id_shards: Callable[..., list[Path]], transform: Callable[..., Any]
) -> None:
    paths = id_shards([24, 24])

    def noise(workers: int, epoch: int) -> dict[int, float]:
        ds = tt.TFRecordDataset(paths, spec=SPEC, transform=transform, seed=5)
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=6, num_workers=workers, collate_fn=tt.collate)
        return {
            i: v
            for batch in loader
            for i, v in zip(batch["_record_id"].tolist(), batch["noise"].tolist(), strict=True)
        }

    in_process = noise(0, 0)
    assert in_process == noise(2, 0)
    assert in_process != noise(0, 1)
    assert len(set(in_process.values())) == 48
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    list(tt.TFRecordDataset(paths, spec=SPEC, transform=transform))
    assert torch.equal(torch.rand(3), expected_next)  # the caller's RNG is left as it was


def test_torchvision_v2_pipeline_is_reproducible(tmp_path: Path) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    image_module = pytest.importorskip("PIL.Image")
    path = tmp_path / "images.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for i in range(12):
            pixels = np.random.default_rng(i).integers(0, 255, (10, 12, 3), dtype=np.uint8)
            png = io.BytesIO()
            image_module.fromarray(pixels).save(png, format="PNG")
            writer.write({"image": png.getvalue(), "label": i})
    pipeline = v2.Compose(
        [v2.RandomCrop(6), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)]
    )

    def augmented(workers: int) -> dict[int, torch.Tensor]:
        ds = tt.TFRecordDataset(
            path,
            spec={"image": tt.Image(), "label": "int"},
            transform=_ImageTransform(pipeline),
            shuffle=False,
        )
        loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=tt.collate)
        return {i: img for b in loader for i, img in zip(b["_record_id"].tolist(), b["image"], strict=True)}

    first, second = augmented(0), augmented(2)
    assert first.keys() == set(range(12))
    assert all(torch.equal(first[i], second[i]) for i in first)
    assert first[0].shape == (3, 6, 6) and first[0].dtype == torch.float32
    assert len({tuple(t.flatten().tolist()[:5]) for t in first.values()}) > 1


class _ImageTransform:
    def __init__(self, pipeline: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.pipeline = pipeline

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "image": self.pipeline(sample["image"])}


def test_batch_transform_runs_once_per_batch(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([10])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5, transform=lambda b: {**b, "n": len(b["id"])})
    assert [b["n"] for b in ds] == [5, 5]


def test_index_none_uses_fresh_index_or_scans(
    id_shards: Callable[..., list[Path]], caplog: pytest.LogCaptureFixture
) -> None:
    paths = id_shards([5, 6], write_index=False)
    with caplog.at_level(logging.INFO, logger="torch_tfrecord"):
        ds = tt.TFRecordDataset(paths, spec=SPEC)
    assert ds.num_records == 11
    assert "scanned it in memory" in caplog.text and "shard-000" in caplog.text
    tt.save_index(tt.build_index(paths[0]), tt.default_index_path(paths[0]))
    with open(paths[0], "ab") as f:
        f.write(tt.encode_record(b"late"))
    with pytest.raises(tt.StaleIndexError, match="shard-000"):
        tt.TFRecordDataset(paths, spec=SPEC)


def test_index_pattern_mapping_and_function(id_shards: Callable[..., list[Path]], tmp_path: Path) -> None:
    paths = id_shards([5, 6], write_index=False)
    folder = tmp_path / "indexes"
    folder.mkdir()
    for path in paths:
        tt.save_index(tt.build_index(path), folder / (path.stem + ".index"))
    pattern = str(folder / "{stem}.index")
    assert tt.TFRecordDataset(paths, index=pattern).num_records == 11
    mapping = {path.name: str(folder / (path.stem + ".index")) for path in paths}
    assert tt.IndexedTFRecordDataset(paths, index=mapping)[10]["id"].tolist() == [10]
    assert len(tt.IndexedTFRecordDataset(paths, index=lambda p: pattern.format(stem=Path(p).stem))) == 11
    with pytest.raises(tt.SourceNotFoundError, match="no entry"):
        tt.TFRecordDataset(paths, index={})
    with pytest.raises(ValueError, match="unknown field"):
        tt.TFRecordDataset(paths, index="{nope}.idx")


def test_compressed_file_is_read_by_record(
    golden_copy: Callable[[str], Path], golden: dict[str, Any]
) -> None:
    path = golden_copy("gzip.tfrecord.gz")  # TensorFlow-written raw payloads: read by record id
    files = tt.TFRecordDataset(path, spec={}).files
    assert any(spec.inflating for spec in files.specs) and files.shard_sizes == (len(golden["payloads"]),)
    order = [5, 0, len(golden["payloads"]) - 1]
    assert files.read(order) == [golden["payloads"][i] for i in order]


def _damage_payload(path: Path, record: int) -> None:
    table = tt.load_index(tt.default_index_path(path))
    offset = int(table[record, 0]) + 12
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_record_raises_naming_file_and_record(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([10, 10])
    _damage_payload(paths[1], 3)
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, shuffle=False)
    with pytest.raises(tt.CorruptRecordError, match=r"shard-001\.tfrecord.*record 3"):
        list(ds)


def test_damaged_record_skipped_keeps_counts(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([10, 10])
    _damage_payload(paths[1], 3)  # global id 13
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=4, shuffle=False, on_error="skip")
    batches = list(ds)
    assert len(batches) == len(ds) == 5 and all(len(b["id"]) == 4 for b in batches)
    ids, padding = _ids(batches)
    assert 13 not in ids
    assert sorted(_real(ids, padding)) == [i for i in range(20) if i != 13]
    assert sum(padding) == 1


def test_decode_error_names_feature_file_and_record(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([4, 4])
    ds = tt.TFRecordDataset(paths, spec={"x": tt.FixedLen((1,), torch.float32)}, batch_size=4, shuffle=False)
    # Record 0's "x" is an empty list, written as a Feature with no list set: TensorFlow (and so
    # we) read that as a missing key, which a FixedLen without a default refuses.
    with pytest.raises(
        tt.MissingFeatureError, match=r"'x' has no values in record 0 of '.*shard-000\.tfrecord'"
    ):
        list(ds)


def test_fewer_records_than_a_global_batch(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([3])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=2, world_size=2, rank=1)
    assert len(ds) == 0 and list(ds) == []
    padded = tt.TFRecordDataset(paths, spec=SPEC, batch_size=2, world_size=2, rank=1, drop_last=False)
    ids, padding = _ids(padded)
    assert len(ids) == 2 and padding.count(True) == 1


def test_reserved_keys_and_bad_options_are_refused(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([3])
    with pytest.raises(ValueError, match="reserved"):
        tt.TFRecordDataset(paths, spec={"_record_id": "int"})
    with pytest.raises(ValueError, match="on_error"):
        tt.TFRecordDataset(paths, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shuffle"):
        tt.TFRecordDataset(paths, shuffle="block")  # type: ignore[arg-type]


def test_rank_and_world_size_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_world() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_world() == (2, 4)
    assert resolve_world(rank=1) == (1, 4)
    assert resolve_world(0, 1) == (0, 1)


def test_spawned_persistent_workers_follow_set_epoch(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([12, 12])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=6)
    loader = DataLoader(
        ds, batch_size=None, num_workers=1, persistent_workers=True, multiprocessing_context="spawn"
    )
    seen = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        seen.append(_ids(loader)[0])
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert _ids(ds)[0] == seen[epoch]


# IndexedTFRecordDataset


def test_indexed_dataset_random_access(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([3, 0, 5])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    assert len(ds) == 8
    assert [int(ds[i]["id"]) for i in range(8)] == list(range(8))
    assert int(ds[-1]["id"]) == 7
    assert ds[5]["x"].tolist() == [5.0, 5.0]
    with pytest.raises(IndexError, match="index 8 out of range"):
        ds[8]
    samples = ds.__getitems__([7, 0, 3])
    assert [int(s["id"]) for s in samples] == [7, 0, 3]


def test_indexed_dataset_with_samplers(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([40, 23])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=1)
        loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, collate_fn=tt.collate)
        seen += [i for b in loader for i in b["id"].tolist()]
    assert set(seen) == set(range(63))
    _train, val = random_split(ds, [50, 13], generator=torch.Generator().manual_seed(0))
    assert sorted(int(s["id"]) for s in val) == sorted(val.indices)


def test_indexed_dataset_pickles_without_open_files(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([5])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    assert int(ds[2]["id"]) == 2  # opens the file
    assert ds.files.pool.opened("local")  # an open descriptor ...
    clone = pickle.loads(pickle.dumps(ds))
    assert not clone.files.pool.opened("local")  # ... that was not pickled
    assert int(clone[4]["id"]) == 4
    loader = DataLoader(
        ds, batch_size=5, num_workers=1, multiprocessing_context="spawn", collate_fn=tt.collate
    )
    assert next(iter(loader))["id"].tolist() == [0, 1, 2, 3, 4]


def test_indexed_dataset_transform_is_seeded_per_index(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([6])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC, transform=_noise, seed=3)
    first = [float(ds[i]["noise"]) for i in range(6)]
    assert first == [float(ds[i]["noise"]) for i in range(6)]
    ds.set_epoch(1)
    assert first != [float(ds[i]["noise"]) for i in range(6)]


def test_file_changed_after_opening_is_a_stale_index_error(id_shards: Callable[..., list[Path]]) -> None:
    paths = id_shards([6, 6])
    ds = tt.IndexedTFRecordDataset(paths, spec=SPEC)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 2])  # shrank under the open dataset
    with pytest.raises(tt.StaleIndexError, match=r"shard-001\.tfrecord.*shrank"):
        ds[11]
    # Same size, other framing: record 1's header now announces one byte less (with a valid CRC).
    table = tt.load_index(tt.default_index_path(paths[1]))
    offset, framed = int(table[1, 0]), int(table[1, 1])
    header = tt.encode_record(b"\x00" * (framed - 17))[:12]
    paths[1].write_bytes(data[:offset] + header + data[offset + 12 :])
    expected = rf"record 1 of .*shard-001\.tfrecord' says {framed} framed bytes, but .* has {framed - 1}:"
    with pytest.raises(tt.StaleIndexError, match=expected):
        ds[7]


def test_spec_none_keeps_a_column_type_across_batches(tmp_path: Path) -> None:
    """TFX writes a Feature with no list for an empty CSV cell: the batches where every cell of a
    column is empty take the column's type from the dataset (sampled at construction), not float32."""
    from wire import entry, example

    path = tmp_path / "csv.tfrecord"
    with tt.RecordWriter(path) as writer:
        for i in range(6):
            if i < 4:
                writer.write(example(entry(b"age", b""), entry(b"city", b"")) + tt.encode_example({"id": i}))
            else:
                writer.write(tt.encode_example({"id": i, "age": 40 + i, "city": tt.BytesList([b"Oslo"])}))
    for dataset in (
        tt.TFRecordDataset(path, batch_size=2, shuffle=False),
        tt.IndexedTFRecordDataset(path),
    ):
        if isinstance(dataset, tt.IndexedTFRecordDataset):
            batches = [dataset.__getitems__([2 * b, 2 * b + 1]) for b in range(3)]
            ages = [sample["age"] for batch in batches for sample in batch]
            assert [age.dtype for age in ages] == [torch.int64] * 6
            assert [sample["city"] for batch in batches for sample in batch][:2] == [[], []]
            continue
        batches = list(dataset)
        assert [batch["age"].values.dtype for batch in batches] == [torch.int64] * 3
        assert [batch["city"] for batch in batches] == [[[], []], [[], []], [[b"Oslo"], [b"Oslo"]]]
        assert batches[2]["age"].values.tolist() == [44, 45]


# ---- guards against common mistakes (torch_tfrecord/_guards.py) ---------------------------------


@pytest.mark.parametrize("workers", [0, 1])
def test_a_batch_mode_dataset_batched_again_is_refused(
    id_shards: Callable[..., list[Path]], workers: int
) -> None:
    paths = id_shards([40])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=8)
    with pytest.raises(ValueError, match=r"batches them again: use DataLoader\(dataset, batch_size=None\)"):
        next(iter(DataLoader(ds, batch_size=4, num_workers=workers)))
    assert len(next(iter(DataLoader(ds, batch_size=None, num_workers=workers)))["id"]) == 8
    assert len(next(iter(ds))["id"]) == 8  # iterated directly: no loader, nothing to check


def test_varlen_samples_under_the_default_collate_name_tt_collate(
    id_shards: Callable[..., list[Path]],
) -> None:
    paths = id_shards([30])
    ds = tt.TFRecordDataset(paths, spec=SPEC, drop_last=False)
    with pytest.raises(ValueError, match=r"VarLen features \['x'\].*collate_fn=tt.collate"):
        next(iter(DataLoader(ds, batch_size=4)))
    fixed = tt.TFRecordDataset(paths, spec={"id": SPEC["id"]}, drop_last=False)
    assert next(iter(DataLoader(fixed, batch_size=4)))["id"].shape == (4,)  # fixed shapes stack
    assert isinstance(next(iter(DataLoader(ds, batch_size=4, collate_fn=tt.collate)))["x"], tt.Ragged)


def test_an_empty_source_list_is_refused() -> None:
    from torch_tfrecord.records.shards.files import RecordFiles

    for make in (
        lambda: tt.TFRecordDataset([], spec=SPEC),
        lambda: tt.IndexedTFRecordDataset([], spec=SPEC),
        lambda: RecordFiles.from_sources([]),
    ):
        with pytest.raises(ValueError, match=r"sources=\[\] is empty: give at least one file"):
            make()


def test_a_second_pass_over_the_same_shuffled_epoch_warns_once(
    id_shards: Callable[..., list[Path]],
) -> None:
    import warnings

    paths = id_shards([20])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _ids(ds)[0]
        for epoch in (1, 2):  # set_epoch each time: new orders, nothing to say
            ds.set_epoch(epoch)
            assert _ids(ds)[0] != first
        assert not caught
        again = _ids(ds)[0]  # epoch 2 once more: the same order
        _ids(ds)
    assert [str(w.message) for w in caught] == [
        "the shuffled dataset starts epoch 2 again after a complete pass, in the same order: "
        "call dataset.set_epoch(epoch) before each epoch for a new order"
    ]
    ds.set_epoch(2)
    assert again == _ids(ds)[0]


def test_no_warning_unshuffled_or_resuming(id_shards: Callable[..., list[Path]]) -> None:
    import warnings

    paths = id_shards([20])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5, shuffle=False)
        _ids(plain), _ids(plain)  # the same order is what shuffle=False asks for
        ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5)
        iterator = iter(ds)
        next(iterator)
        state = ds.state_dict()
        del iterator
        _ids(ds)  # the first whole pass
        ds.load_state_dict(state)
        _ids(ds)  # resumes the epoch: not a second pass
    assert not caught


def test_workers_warn_about_a_repeated_epoch(
    id_shards: Callable[..., list[Path]], capfd: pytest.CaptureFixture[str]
) -> None:
    """A spawned worker prints its warnings to the inherited stderr (a forked one here would
    record them in the copy of pytest's warning catcher); the flag shared by the workers and
    the main process lets only one warn. (Without any set_epoch each pass is the next epoch:
    only an epoch set once and gone through again repeats its order.)"""
    paths = id_shards([20])
    ds = tt.TFRecordDataset(paths, spec=SPEC, batch_size=5)
    ds.set_epoch(0)
    loader = DataLoader(
        ds, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context="spawn"
    )
    _ids(loader)
    assert "set_epoch" not in capfd.readouterr().err
    _ids(loader)
    _ids(loader)
    assert capfd.readouterr().err.count("call dataset.set_epoch(epoch) before each epoch") == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_dropping_padding_works_on_every_column(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "mixed.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for i in range(5):
            writer.write({"id": i, "x": [float(i)] * (i % 3), "name": f"n{i}".encode(), "tags": [b"t"] * i})
    spec = {"id": tt.FixedLen((), torch.int64), "x": "float", "name": tt.FixedLen((), bytes), "tags": "bytes"}
    ds = tt.TFRecordDataset(path, spec=spec, batch_size=4, drop_last=False, shuffle=False)
    batches = list(DataLoader(ds, batch_size=None, num_workers=workers))
    last = batches[-1]
    keep = ~last["_padding"]
    assert last["_padding"].tolist() == [False, True, True, True]
    assert last["id"][keep].tolist() == [4]
    assert last["x"][keep].tolist() == [[4.0]]  # a Ragged column
    assert last["name"][keep] == [b"n4"]  # a list of bytes
    assert last["tags"][keep] == [[b"t"] * 4]  # a list of lists of bytes
    assert last["name"][torch.nonzero(keep).reshape(-1)] == [b"n4"]
    kept = [name for batch in batches for name in batch["name"][~batch["_padding"]]]
    assert kept == [f"n{i}".encode() for i in range(5)]
