"""Selections of records: the id sets behind them, the selection file, and every form ``subset=``
takes (a fraction or a count drawn once from the seed, ranges, ids, a mask, a selection), each
refused with a clear error where it cannot apply."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from id_shards import write_id_shards

import torch_tfrecord as tt
from torch_tfrecord.data.select.id_sets import BitSet, IdSetParts, RunSet, compact, from_ids
from torch_tfrecord.data.select.selection_file import MAGIC, ShardPrint, encode_selection

SHARDS = (40, 0, 75, 33, 2)  # 150 records, an empty shard
TOTAL = sum(SHARDS)


def write_shards(folder: Path, sizes: tuple[int, ...] = SHARDS, prefix: str = "part") -> str:
    def features(record: int) -> dict[str, object]:
        return {"label": record % 7, "name": f"r{record}".encode()}

    return write_id_shards(folder, sizes, prefix=prefix, extra=features)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("subsets"))


def _files(shards: str) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(shards, spec={"id": "int"}).files


# -- id sets ---------------------------------------------------------------------------------


@st.composite
def id_arrays(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    size = draw(st.integers(0, 700))
    if size == 0:
        return np.zeros(0, np.int64), 0
    kind = draw(st.sampled_from(["random", "runs", "dense"]))
    seed = draw(st.integers(0, 2**32 - 1))
    generator = np.random.default_rng(seed)
    if kind == "random":
        mask = generator.random(size) < draw(st.floats(0, 1))
    elif kind == "dense":
        mask = generator.random(size) < 0.95
    else:
        mask = np.zeros(size, bool)
        for _ in range(draw(st.integers(0, 5))):
            start = int(generator.integers(0, size))
            mask[start : start + int(generator.integers(1, 80))] = True
    return np.flatnonzero(mask).astype(np.int64), size


@settings(max_examples=200, deadline=None)
@given(id_arrays())
def test_runs_and_bits_give_the_same_members_ranks_and_runs(drawn: tuple[np.ndarray, int]) -> None:
    ids, size = drawn
    mask = np.zeros(size, bool)
    mask[ids] = True
    as_bits = BitSet(np.packbits(mask, bitorder="little"), size)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.view(np.int8), [0]])))
    as_runs = RunSet(edges[::2], edges[1::2], size)
    chosen = from_ids(ids[::-1], size)  # any order
    for each in (as_bits, as_runs, chosen):
        assert len(each) == len(ids)
        assert each.ids().tolist() == ids.tolist()
        probes = np.arange(size + 1)
        assert each.rank(probes).tolist() == np.searchsorted(ids, probes).tolist()
        low, high = size // 3, size - size // 5
        assert each.mask(low, high).tolist() == mask[low:high].tolist()
        starts, stops = each.runs(low, high)
        rebuilt = np.zeros(size, bool)
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            rebuilt[a:b] = True
        assert rebuilt[low:high].tolist() == mask[low:high].tolist() and not rebuilt[:low].any()
        assert each.count_runs(low, high) == len(starts)
    runs = as_runs.count_runs(0, size)
    assert isinstance(chosen, RunSet if compact(size, runs) else BitSet)


def test_a_position_or_id_out_of_range_is_an_index_error() -> None:
    chosen = from_ids([3, 5], 10)
    with pytest.raises(IndexError, match=r"\[0, 2\)"):
        chosen.select([2])
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        from_ids([10], 10)


def test_pieces_join_across_their_bounds() -> None:
    parts = IdSetParts(20)
    parts.add_runs(8, [5], [8])
    parts.add_mask(np.array([1, 1, 0, 1] + [0] * 4, bool))
    parts.add_bits(4, np.packbits(np.array([1, 0, 0, 1], bool), bitorder="little"))
    built = parts.build()
    assert built.ids().tolist() == [5, 6, 7, 8, 9, 11, 16, 19]
    assert built.count_runs(0, 20) == 4  # 5..9 runs on across the bound


# -- the selection file -------------------------------------------------------------------------


@st.composite
def selections(draw: st.DrawFn) -> tuple[list[ShardPrint], np.ndarray]:
    sizes = draw(st.lists(st.integers(0, 300), min_size=1, max_size=6))
    prints = [
        ShardPrint(f"s-{i}.tfrecord", 100 * n + i, n, draw(st.sampled_from(["", "etag1"])))
        for i, n in enumerate(sizes)
    ]
    ids, _ = draw(id_arrays().filter(lambda drawn: True))
    total = sum(sizes)
    ids = np.unique(ids[ids < total]) if total else np.zeros(0, np.int64)
    return prints, ids


@settings(max_examples=150, deadline=None)
@given(selections())
def test_the_file_gives_back_the_selection(drawn: tuple[list[ShardPrint], np.ndarray]) -> None:
    prints, ids = drawn
    selection = tt.Selection(prints, from_ids(ids, sum(p.records for p in prints)), "label == 3")
    data = selection.to_bytes()
    again = tt.Selection.from_bytes(data)
    assert again == selection and again.record_ids().tolist() == ids.tolist()
    assert again.shards == selection.shards and again.where == "label == 3"
    assert len(data) <= 64 + sum(-(-p.records // 8) for p in prints) + 300 * len(prints)


def test_a_hundred_million_records_fit_in_twelve_and_a_half_megabytes() -> None:
    size, shards = 10**8, 1000
    prints = [
        ShardPrint(f"train-{i:05d}-of-01000.tfrecord", 10**9, size // shards, "") for i in range(shards)
    ]
    generator = np.random.default_rng(0)
    bits = np.frombuffer(generator.bytes(size // 8), dtype=np.uint8)  # every other record, at random
    selection = tt.Selection(prints, BitSet(bits, size))
    data = selection.to_bytes()
    assert len(data) <= 12.5 * 2**20, len(data)
    sparse = tt.Selection(prints, from_ids(np.arange(0, size, 1000), size))  # 0.1%: runs are smaller
    assert len(sparse.to_bytes()) < 100_000 * 8 + 2**16  # 8 bytes a run
    assert tt.Selection.from_bytes(sparse.to_bytes()) == sparse


@pytest.mark.parametrize(
    "damage",
    ["flip a payload byte", "cut short", "not a selection", "another format"],
)
def test_a_damaged_file_is_refused(tmp_path: Path, shards: str, damage: str) -> None:
    selection = tt.Selection.from_ids(_files(shards), np.arange(0, TOTAL, 3))
    data = bytearray(selection.to_bytes())
    if damage == "flip a payload byte":
        data[-10] ^= 0x40
        match = "CRC"
    elif damage == "cut short":
        data = data[:20]
        match = "damaged|cut short"
    elif damage == "not a selection":
        data = bytearray(b"label == 3\n")
        match = "not a selection file"
    else:
        data[len(MAGIC) - 2] = 9  # the magic of another version
        match = "not a selection file"
    path = tmp_path / "bad.ttsel"
    path.write_bytes(bytes(data))
    with pytest.raises(tt.SelectionError, match=match):
        tt.TFRecordDataset(shards, spec={"id": "int"}, select=path)


def test_a_stale_selection_is_refused_naming_the_shard(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "data")
    files = _files(pattern)
    tt.Selection.from_ids(files, [1, 50, 120]).write(tmp_path / "sel.ttsel")
    assert tt.TFRecordDataset(pattern, spec={"id": "int"}, select=tmp_path / "sel.ttsel").num_records == 3
    kept = (tmp_path / "data" / "part-3.tfrecord").read_bytes()
    with tt.ExampleWriter(tmp_path / "data" / "part-3.tfrecord") as writer:  # rewritten: one more record
        for record in range(34):
            writer.write({"id": record, "label": 0, "name": b"x"})
    with pytest.raises(tt.SelectionError, match=r"other data: shard 3 .*part-3.tfrecord.* has records 34"):
        tt.TFRecordDataset(pattern, spec={"id": "int"}, select=tmp_path / "sel.ttsel")
    with pytest.raises(tt.SelectionError, match=r"made for 5 shards .* the dataset has 4"):
        tt.TFRecordDataset(str(tmp_path / "data" / "part-[0-3].tfrecord"), select=tmp_path / "sel.ttsel")
    (tmp_path / "data" / "part-3.tfrecord").write_bytes(kept)
    (tmp_path / "data" / "part-3.tfrecord.idx").unlink()  # (the writer's index of the other records)
    os.rename(tmp_path / "data" / "part-4.tfrecord", tmp_path / "data" / "part-9.tfrecord")
    with pytest.raises(tt.SelectionError, match=r"shard 4 .* is 'part-9.tfrecord'"):
        tt.TFRecordDataset(pattern, select=tmp_path / "sel.ttsel")


# -- subset= -------------------------------------------------------------------------------------


def _ids(dataset: tt.TFRecordDataset) -> list[int]:
    return [sample["_record_id"] for sample in dataset]


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5, 1.0])
def test_a_fraction_is_drawn_once_from_the_seed(shards: str, fraction: float) -> None:
    make = lambda **kw: tt.TFRecordDataset(shards, spec={"id": "int"}, subset=fraction, shuffle=False, **kw)  # noqa: E731
    first = _ids(make(seed=4))
    assert len(first) == round(fraction * TOTAL) == len(set(first))
    assert first == sorted(first)  # in file order: records keep their ids
    assert _ids(make(seed=4)) == first
    dataset = make(seed=4)
    dataset.set_epoch(3)
    assert _ids(dataset) == first  # the same every epoch
    world = [make(seed=4, rank=rank, world_size=3, drop_last=False) for rank in range(3)]
    assert sorted({i for ds in world for i in _ids(ds)}) == first  # whatever the world size
    if 0 < fraction < 1:
        assert _ids(make(seed=5)) != first


def test_a_count_ranges_ids_and_a_mask(shards: str) -> None:
    make = lambda subset: tt.TFRecordDataset(shards, spec={"id": "int"}, subset=subset, shuffle=False)  # noqa: E731
    assert len(_ids(make(17))) == 17
    assert _ids(make(range(30, 45))) == list(range(30, 45))
    assert _ids(make([range(140, 150), range(0, 3), range(1, 5)])) == [0, 1, 2, 3, 4, *range(140, 150)]
    assert _ids(make(np.array([149, 7, 7, 60]))) == [7, 60, 149]
    mask = np.zeros(TOTAL, bool)
    mask[::50] = True
    assert _ids(make(mask)) == [0, 50, 100]
    samples = list(make([5, 77]))
    assert [int(s["id"]) for s in samples] == [5, 77]  # the records themselves, not others


def test_subset_narrows_a_selection(shards: str, tmp_path: Path) -> None:
    selection = tt.Selection.from_ids(_files(shards), np.arange(0, TOTAL, 2), where="even")
    selection.write(tmp_path / "even.ttsel")
    make = lambda **kw: tt.TFRecordDataset(shards, spec={"id": "int"}, shuffle=False, **kw)  # noqa: E731
    drawn = _ids(make(select=tmp_path / "even.ttsel", subset=0.2))
    assert len(drawn) == 15 and all(i % 2 == 0 for i in drawn)
    assert _ids(make(select=selection, subset=range(0, 10))) == [0, 2, 4, 6, 8]
    assert _ids(make(subset=tmp_path / "even.ttsel")) == list(range(0, TOTAL, 2))


@pytest.mark.parametrize(
    ("subset", "error", "match"),
    [
        (0.0, tt.SelectionError, r"fraction in \(0, 1\]"),
        (1.5, tt.SelectionError, r"fraction in \(0, 1\]"),
        (0.001, tt.SelectionError, "keeps none"),
        (0, tt.SelectionError, r"count of records in \[1, 150\]"),
        (151, tt.SelectionError, r"count of records in \[1, 150\]"),
        (True, TypeError, "not a bool"),
        ([150], tt.SelectionError, r"must lie in \[0, 150\)"),
        ([], tt.SelectionError, "keeps none of the 150 records"),
        (range(0, 10, 2), tt.SelectionError, "step 1"),
        (np.zeros(3, bool), tt.SelectionError, "has 150 values"),
        ([1.5, 2.5], TypeError, "1-D ints"),
        ({"a": 1}, TypeError, "subset= takes"),
    ],
)
def test_a_subset_that_cannot_apply_is_refused(shards: str, subset: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        tt.TFRecordDataset(shards, spec={"id": "int"}, subset=subset)  # type: ignore[arg-type]


def test_the_indexed_dataset_reads_the_selected_records_by_place(shards: str) -> None:
    dataset = tt.IndexedTFRecordDataset(shards, spec={"id": "int"}, subset=[range(38, 42), range(148, 150)])
    assert len(dataset) == 6
    assert [int(dataset[i]["id"]) for i in range(6)] == [38, 39, 40, 41, 148, 149]
    assert [int(s["id"]) for s in dataset.__getitems__([5, 0, -1])] == [149, 38, 149]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, TOTAL), st.integers(0, 5))
def test_a_count_drawn_from_a_selection_stays_inside_it(shards: str, count: int, seed: int) -> None:
    within = tt.Selection.from_ids(_files(shards), np.arange(1, TOTAL, 3))
    if count > len(within):
        with pytest.raises(tt.SelectionError, match="count of records"):
            tt.TFRecordDataset(shards, select=within, subset=count, seed=seed)
        return
    files = tt.TFRecordDataset(shards, spec={"id": "int"}, select=within, subset=count, seed=seed).files
    chosen = files.selection.record_ids()
    assert len(chosen) == count and set(chosen.tolist()) <= set(within.record_ids().tolist())
    assert files.shard_sizes == tuple(files.selection.counts.tolist())


def test_encode_is_the_files_layout(shards: str) -> None:
    selection = tt.Selection.from_ids(_files(shards), [0, 1, 2, 149])
    assert (
        encode_selection(selection.shards, selection.ids, "")
        == tt.Selection(selection.shards, selection.ids).to_bytes()
    )
    assert selection.to_bytes().startswith(MAGIC)
    assert repr(selection) == "Selection(4 of 150 records in 5 shards)"
