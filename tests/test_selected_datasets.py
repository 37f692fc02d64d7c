"""A dataset over a selection keeps every promise over the selected records: each exactly once per
epoch across ranks and workers, equal batches on every rank (``len`` true), every shuffle, resume
mid-epoch also on another world size (for real: 2 gloo ranks killed, resumed on 3), mixing; and
reads only the selected records' bytes (a 1% selection of remote shards: about 1% of the bytes)."""

from __future__ import annotations

import collections
import datetime
import itertools
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from gloo import free_port, spawn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from id_shards import write_id_shards
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.select.selected_files import SelectedFiles

SIZES = (23, 0, 41, 17, 60)  # 141 records, uneven shards and an empty one
TOTAL = sum(SIZES)
SPEC = {"id": tt.FixedLen((), torch.int64)}
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_id_shards(tmp_path_factory.mktemp("selected"), SIZES)


def _real(items: list[dict[str, Any]]) -> list[int]:
    """The record ids of what a loader gave (batches or collated samples), padding left out."""
    ids = []
    for item in items:
        pairs = zip(item["_record_id"].tolist(), item["_padding"].tolist(), item["id"].tolist(), strict=True)
        for record, padding, value in pairs:
            assert record == value  # the record read is the one named
            if not padding:
                ids.append(record)
    return ids


def _loader(dataset: tt.TFRecordDataset, workers: int, batch: int | None) -> DataLoader[Any]:
    if dataset.plan.batch_size is not None:
        return DataLoader(dataset, batch_size=None, num_workers=workers)
    return DataLoader(dataset, batch_size=batch, num_workers=workers, collate_fn=tt.collate)


@st.composite
def configurations(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["random", "ranges", "one shard"]))
    generator = np.random.default_rng(draw(st.integers(0, 2**31)))
    if kind == "random":
        mask = generator.random(TOTAL) < draw(st.sampled_from([0.05, 0.3, 0.7, 1.0]))
    elif kind == "ranges":
        mask = np.zeros(TOTAL, bool)
        for _ in range(3):
            start = int(generator.integers(0, TOTAL))
            mask[start : start + int(generator.integers(1, 30))] = True
    else:
        mask = np.zeros(TOTAL, bool)
        mask[64:81] = True  # shard 3, whole
    if not mask.any():
        mask[int(generator.integers(0, TOTAL))] = True
    return {
        "ids": np.flatnonzero(mask),
        "shuffle": draw(st.sampled_from([False, "global", "shards", "block:4"])),
        "world": draw(st.integers(1, 4)),
        "workers": draw(st.sampled_from([0, 0, 1, 2])),
        "mode": draw(st.sampled_from(["batch", "sample"])),
        "batch": draw(st.integers(1, 6)),
        "drop_last": draw(st.booleans()),
        "seed": draw(st.integers(0, 3)),
        "epoch": draw(st.integers(0, 2)),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(configurations())
def test_exactly_the_selected_records_and_equal_batches(shards: str, config: dict[str, Any]) -> None:
    ids = config["ids"]
    selection = tt.Selection.from_ids(tt.TFRecordDataset(shards).files, ids)
    seen, lengths, counts = [], [], []
    for rank in range(config["world"]):
        dataset = tt.TFRecordDataset(
            shards,
            spec=SPEC,
            select=selection,
            shuffle=config["shuffle"],
            seed=config["seed"],
            batch_size=config["batch"] if config["mode"] == "batch" else None,
            drop_last=config["drop_last"],
            rank=rank,
            world_size=config["world"],
        )
        assert dataset.num_records == len(ids)
        dataset.set_epoch(config["epoch"])
        loader = _loader(dataset, config["workers"], config["batch"])
        items = list(loader)
        assert len(items) == len(loader)  # len() true
        lengths.append(len(items))
        counts.append(sum(len(item["_record_id"]) for item in items))
        seen += _real(items)
    assert len(set(lengths)) == 1 and len(set(counts)) == 1  # equal batches and samples on every rank
    assert len(seen) == len(set(seen))  # each at most once
    assert set(seen) <= set(ids.tolist())  # only selected records
    unit = config["world"] * (config["batch"] if config["mode"] == "batch" else 1)
    if config["drop_last"]:
        assert len(seen) == len(ids) - len(ids) % unit  # fewer than one global batch left out
    else:
        assert sorted(seen) == ids.tolist()  # every selected record


def test_another_epoch_another_order_of_the_same_records(shards: str) -> None:
    dataset = tt.TFRecordDataset(shards, spec=SPEC, subset=0.5, seed=2, batch_size=5, drop_last=False)
    orders = [_real(list(dataset)) for _ in range(2)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])
    assert sorted(orders[0]) == dataset.files.selection.record_ids().tolist()


@pytest.mark.parametrize("mode", ["batch", "sample"])
def test_resume_mid_epoch_on_another_world_size_in_one_process(shards: str, mode: str) -> None:
    selection = tt.Selection.from_ids(tt.TFRecordDataset(shards).files, np.arange(1, TOTAL, 2))

    def make(rank: int, world: int) -> tt.TFRecordDataset:
        batch = 3 if mode == "batch" else None
        return tt.TFRecordDataset(
            shards,
            spec=SPEC,
            select=selection,
            batch_size=batch,
            drop_last=False,
            seed=7,
            rank=rank,
            world_size=world,
        )

    seen, states = [], []
    for rank in range(2):
        dataset = make(rank, 2)
        dataset.set_epoch(1)
        if mode == "batch":  # with a worker on rank 1: the batches taken say where it is
            taken = list(itertools.islice(_loader(dataset, rank, 3), 2 + rank))
            states.append(dataset.state_dict(consumed=len(taken)))
        else:  # in this process, the dataset knows
            taken = list(itertools.islice(_loader(dataset, 0, 3), 2 + rank))
            states.append(dataset.state_dict())
        seen += _real(taken)
    lengths = []
    for rank in range(3):
        dataset = make(rank, 3)
        dataset.load_state_dict(states)
        rest = list(_loader(dataset, 1, 3))
        lengths.append(len(rest))
        seen += _real(rest)
    assert len(set(lengths)) == 1
    assert sorted(seen) == selection.record_ids().tolist()  # every selected record of epoch 1, once


def test_a_state_of_another_selection_is_refused(shards: str) -> None:
    files = tt.TFRecordDataset(shards).files
    one = tt.Selection.from_ids(files, np.arange(0, 60))
    other = tt.Selection.from_ids(files, np.arange(60, 120))  # as many records, others
    state = tt.TFRecordDataset(shards, select=one, batch_size=4).state_dict()
    with pytest.raises(ValueError, match=r"saved with data \(files, sizes, record counts or selection\)"):
        tt.TFRecordDataset(shards, select=other, batch_size=4).load_state_dict(state)


def test_a_mix_of_selections_reads_each_sources_selected_records(shards: str) -> None:
    files = tt.TFRecordDataset(shards).files
    evens = tt.Selection.from_ids(files, np.arange(0, TOTAL, 2))
    small = tt.Selection.from_ids(files, [3, 70, 140])
    sources = {
        "evens": tt.TFRecordDataset(shards, spec=SPEC, select=evens, seed=1),
        "small": tt.TFRecordDataset(shards, spec=SPEC, subset=small, seed=2),
    }
    mix = tt.mix(sources, {"evens": 2, "small": 1}, samples_per_epoch=90, batch_size=9)
    per_source: dict[int, list[int]] = collections.defaultdict(list)
    for batch in mix:
        for number, name in enumerate(mix.names):
            if name in batch:
                per_source[number] += batch[name]["_record_id"].tolist()
    assert set(per_source[0]) <= set(range(0, TOTAL, 2)) and len(per_source[0]) == 60
    assert collections.Counter(per_source[1]) == {3: 10, 70: 10, 140: 10}  # 30 places: 10 passes of 3


def test_a_packed_selection_packs_each_selected_sequence_once(tmp_path: Path) -> None:
    from lm_data import KEYS, all_tokens, row_pieces, token_counts, write_lm
    from lm_data import SPEC as LM_SPEC

    lengths = np.random.default_rng(46).integers(0, 40, (90, 2))
    paths = write_lm(tmp_path / "lm", lengths)
    chosen = np.arange(1, 90, 3)
    seen: collections.Counter[tuple[int, str, int]] = collections.Counter()
    rows_per_rank = []
    for rank in range(2):
        source = tt.TFRecordDataset(paths, spec=LM_SPEC, subset=chosen, seed=4)
        packed = tt.pack(source, 32, KEYS, split_long=True, batch_size=2, rank=rank, world_size=2)
        rows = [
            row
            for batch in DataLoader(packed, batch_size=None, num_workers=rank)
            for row in row_pieces(batch)
        ]
        rows_per_rank.append(len(rows))
        seen += token_counts(rows)
    assert rows_per_rank[0] == rows_per_rank[1]
    assert seen == all_tokens(lengths, chosen.tolist())  # every token of the selected records, once


def test_from_tfds_takes_subset_and_select_over_a_split_slice() -> None:
    golden = Path(__file__).resolve().parent / "data" / "tfds" / "golden_features" / "1.0.0"
    whole = tt.from_tfds(golden, "train[4:20]", shuffle=False)
    ids = [int(sample["id"]) for sample in whole]
    half = tt.from_tfds(golden, "train[4:20]", subset=0.5, seed=2, shuffle=False)
    places = [sample["_record_id"] for sample in half]
    assert [int(sample["id"]) for sample in half] == [ids[p] for p in places] and len(places) == 8
    selection = tt.select(whole.files, where="id >= 10")  # the slice's records, by their ids
    chosen = tt.from_tfds(golden, "train[4:20]", select=selection, shuffle=False)
    assert [int(sample["id"]) for sample in chosen] == [i for i in ids if i >= 10]
    assert len(tt.from_tfds(golden, "train[4:20]", select=selection, indexed=True)) == len(selection)
    with pytest.raises(tt.SelectionError, match="made for other data|made for 3 shards"):
        tt.from_tfds(golden, "train[5:20]", select=selection)  # another slice: other records


def test_reads_only_the_selected_records(shards: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = tt.TFRecordDataset(shards, spec=SPEC, subset=[range(5, 8), range(100, 101)], batch_size=2)
    assert isinstance(dataset.files, SelectedFiles)
    asked: list[list[int]] = []
    read = dataset.files.base.read_framed
    monkeypatch.setattr(
        dataset.files.base,
        "read_framed",
        lambda ids, scratch=None: asked.append(list(ids)) or read(ids, scratch),
    )
    list(dataset)
    assert sorted(i for ids in asked for i in ids) == [5, 6, 7, 100]


@pytest.mark.parametrize("compiled", [True, False], ids=["native", "numpy"])
def test_places_map_to_record_ids_and_out_of_range_places_are_refused(
    shards: str, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch_tfrecord.data.select import selected_files

    if not compiled:
        monkeypatch.setattr(selected_files, "_native", None)
    elif selected_files._native is None:
        pytest.skip("the compiled extension is not built")
    files = tt.TFRecordDataset(shards, spec=SPEC, subset=[range(5, 8), range(100, 103)]).files
    assert files.record_ids(np.array([5, 0, 3, 2], dtype=np.int64)).tolist() == [102, 5, 100, 7]
    assert files.record_ids([[1, 4]]).tolist() == [[6, 101]]  # any shape, any int sequence
    for bad in ([6], [0, -1], [-6]):  # past the end; negative (never read from the end)
        with pytest.raises(IndexError, match=r"\[0, 6\) \(the selected records\)"):
            files.record_ids(np.array(bad, dtype=np.int64))
        with pytest.raises(IndexError):
            files.read(bad)


# -- for real: 2 gloo ranks killed mid-epoch, resumed on 3 -------------------------------------


def _job_dataset(shards: str, selection: str) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(shards, spec=SPEC, select=selection, batch_size=4, drop_last=False, seed=9)


def _first_job(rank: int, port: int, shards: str, selection: str, folder: str) -> None:
    """A rank of the first job: 3 batches with a worker, its state saved, then it waits to be killed."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    dataset = _job_dataset(shards, selection)
    dataset.set_epoch(1)
    taken = list(itertools.islice(DataLoader(dataset, batch_size=None, num_workers=1), 3))
    state = dataset.state_dict(consumed=len(taken))
    result = {"len": len(dataset), "ids": _real(taken), "state": state}
    Path(folder, f"rank{rank}.json").write_text(json.dumps(result))
    time.sleep(TIMEOUT_S)  # killed here, mid-epoch


def _second_job(rank: int, port: int, shards: str, selection: str, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    dist.init_process_group("gloo", rank=rank, world_size=3, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        dataset = tt.TFRecordDataset(
            shards, spec=SPEC, select=selection, batch_size=4, drop_last=False, seed=9
        )
        states = [json.loads(Path(folder, f"rank{old}.json").read_text())["state"] for old in range(2)]
        dataset.load_state_dict(states)
        rest = list(DataLoader(dataset, batch_size=None, num_workers=2))
        gathered: list[Any] = [None] * 3
        dist.all_gather_object(gathered, {"len": len(dataset), "taken": len(rest), "ids": _real(rest)})
        if rank == 0:
            Path(folder, "resumed.json").write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def test_gloo_two_ranks_killed_mid_epoch_resume_on_three(shards: str, tmp_path: Path) -> None:
    files = tt.TFRecordDataset(shards).files
    selection = tt.Selection.from_ids(files, np.flatnonzero(np.random.default_rng(3).random(TOTAL) < 0.6))
    selection.write(tmp_path / "sel.ttsel")
    context = multiprocessing.get_context("spawn")
    port = free_port()
    args = (port, shards, str(tmp_path / "sel.ttsel"), str(tmp_path))
    ranks = [context.Process(target=_first_job, args=(rank, *args)) for rank in range(2)]
    for process in ranks:
        process.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not all(Path(tmp_path, f"rank{r}.json").exists() for r in range(2)):
            assert time.monotonic() < deadline, "the first job did not save its states"
            assert all(p.is_alive() for p in ranks), "a rank of the first job died"
            time.sleep(0.2)
        time.sleep(0.5)  # (the files are written whole: json then text, one call)
    finally:
        for process in ranks:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
            process.join(10)
    assert [p.exitcode for p in ranks] == [-signal.SIGKILL] * 2
    first = [json.loads(Path(tmp_path, f"rank{r}.json").read_text()) for r in range(2)]
    spawn(_second_job, 3, (free_port(), shards, str(tmp_path / "sel.ttsel"), str(tmp_path)), TIMEOUT_S)
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert len({r["len"] for r in resumed}) == 1 and [r["taken"] for r in resumed] == [resumed[0]["len"]] * 3
    ids = [i for r in first for i in r["ids"]] + [i for r in resumed for i in r["ids"]]
    assert sorted(ids) == selection.record_ids().tolist()  # epoch 1: each selected record once


# -- remote: only the selected records' bytes ---------------------------------------------------

REMOTE_RECORDS = 2000  # 8 shards of 250 records of ~4 KB
BLOB = 4000


@pytest.fixture(scope="module")
def s3() -> Any:
    """The endpoint, with 8 shards (their indexes and manifest) under s3://bucket/s/; and their bytes."""
    pytest.importorskip("s3fs")
    import fsspec
    from remote_servers import moto_server, s3_options

    with moto_server() as endpoint:
        options = s3_options(endpoint)
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bucket")
        with tt.ShardedExampleWriter(
            "s3://bucket/s/train", max_records=250, storage_options=options
        ) as writer:
            for record in range(REMOTE_RECORDS):
                writer.write({"id": record, "blob": bytes([record % 251]) * BLOB})
        yield endpoint, sum(fs.size(p) for p in fs.glob("bucket/s/*.tfrecord"))


def _shard_bytes(by_path: dict[str, int]) -> int:
    return sum(count for path, count in by_path.items() if path.endswith(".tfrecord"))


@pytest.mark.usefixtures("fast_retries")
@pytest.mark.usefixtures("no_hedges")  # conftest: the bytes are counted
@pytest.mark.parametrize("cache_dir", [None, False])
def test_a_one_percent_selection_of_remote_shards_fetches_about_one_percent(
    s3: tuple[str, int], cache_dir: Any
) -> None:
    from remote_servers import FaultProxy, s3_options

    endpoint, data = s3
    chosen = np.sort(np.random.default_rng(5).choice(REMOTE_RECORDS, REMOTE_RECORDS // 100, replace=False))
    with FaultProxy(endpoint) as proxy:
        options = s3_options(proxy.url)
        files = tt.TFRecordDataset("s3://bucket/s/", storage_options=options, cache_dir=False).files
        selection = tt.Selection.from_ids(files, chosen)
        proxy.reset()
        dataset = tt.TFRecordDataset(
            "s3://bucket/s/",
            spec=SPEC,
            select=selection,
            batch_size=4,
            storage_options=options,
            cache_dir=cache_dir,
        )
        ids = [
            i for batch in DataLoader(dataset, batch_size=None, num_workers=2) for i in batch["id"].tolist()
        ]
        assert sorted(ids) == chosen.tolist()
        fetched = _shard_bytes(proxy.get_bytes_by_path)
    selected = len(chosen) * (BLOB + 16 + 8)  # about: the payload, its framing and the id
    # Two records of a batch within 64 KiB of one another in a shard share a request (the bytes
    # between them come too): at most that much more per record, and here about 1% in all.
    assert selected <= fetched <= selected + len(chosen) * 64 * 1024, (fetched, selected)
    assert fetched <= 0.02 * data, (fetched, data)


@pytest.mark.usefixtures("fast_retries", "no_hedges")
def test_a_whole_shard_selection_is_cached_whole_and_nothing_else_is_fetched(s3: tuple[str, int]) -> None:
    from remote_servers import FaultProxy, s3_options

    endpoint, data = s3
    with FaultProxy(endpoint) as proxy:
        options = s3_options(proxy.url)
        dataset = tt.TFRecordDataset(
            "s3://bucket/s/", spec=SPEC, subset=range(500, 750), batch_size=25, storage_options=options
        )
        assert dataset.files.specs[2].kind == "cached" and dataset.files.cache is not None
        for _ in range(2):  # two epochs: the shard is fetched once
            assert sorted(i for batch in dataset for i in batch["id"].tolist()) == list(range(500, 750))
        by_path = proxy.get_bytes_by_path
        assert [path for path in by_path if path.endswith(".tfrecord") and by_path[path]] == [
            "/bucket/s/train-00002-of-00008.tfrecord"
        ]
        assert data / 8 <= _shard_bytes(by_path) <= 1.05 * data / 8
