"""The pure plans of packing and length buckets (grouping/packing.py, grouping/buckets.py), by
invariants and oracles: every token of every sequence placed exactly once, rows within their
lengths, the compiled loops the same as their numpy twins, first-fit / next-fit / buckets as their
textbook definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.data.grouping.buckets import BucketOptions, plan_buckets
from torch_tfrecord.data.grouping.groups import Groups
from torch_tfrecord.data.grouping.packing import PackOptions, pack_items, plan_packing
from torch_tfrecord.support.extension import compiled

METHODS = ["first_fit", "best_fit", "concat"]


@st.composite
def epochs(draw: st.DrawFn, max_keys: int = 3) -> tuple[np.ndarray, tuple[int, ...]]:
    """Lengths of an epoch's sequences (one column per key) and each key's row length: uniform,
    heavy-tailed or mostly-empty distributions, some sequences longer than a row."""
    keys = draw(st.integers(1, max_keys))
    capacities = tuple(draw(st.lists(st.integers(1, 40), min_size=keys, max_size=keys)))
    count = draw(st.integers(0, 150))
    seed = draw(st.integers(0, 2**32 - 1))
    shape = draw(st.sampled_from(["uniform", "lognormal", "sparse"]))
    rng = np.random.default_rng(seed)
    caps = np.asarray(capacities)
    if shape == "uniform":
        lengths = rng.integers(0, caps * 3 // 2 + 1, size=(count, keys))
    elif shape == "lognormal":
        lengths = np.round(rng.lognormal(np.log(caps / 4 + 1), 1.0, size=(count, keys)))
    else:
        lengths = rng.integers(0, caps + 1, size=(count, keys)) * (rng.random((count, keys)) < 0.3)
    return lengths.astype(np.int64), capacities


def covered(rows: Groups, lengths: np.ndarray) -> None:
    """Each key's tokens of each sequence are the disjoint union of its pieces' ranges."""
    for k in range(lengths.shape[1]):
        spans: dict[int, list[tuple[int, int]]] = {}
        for sequence, start, stop in zip(
            rows.sequences.tolist(), rows.starts[:, k].tolist(), rows.stops[:, k].tolist()
        ):
            spans.setdefault(sequence, []).append((start, stop))
        for sequence, pieces in spans.items():
            pieces.sort()
            assert pieces[0][0] == 0 and pieces[-1][1] == lengths[sequence, k], (sequence, pieces)
            assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces)), (sequence, pieces)


@settings(max_examples=300, deadline=None)
@given(
    epoch=epochs(),
    method=st.sampled_from(METHODS),
    buffer_size=st.integers(1, 8),
    long=st.sampled_from(["split", "drop"]),
)
def test_every_token_of_every_sequence_lands_once_in_rows_within_their_length(
    epoch: tuple[np.ndarray, tuple[int, ...]], method: str, buffer_size: int, long: str
) -> None:
    lengths, capacities = epoch
    options = PackOptions(
        capacities, method, buffer_size, split_long=long == "split", drop_long=long == "drop"
    )  # type: ignore[arg-type]
    packed = plan_packing(lengths, options)
    rows = packed.rows
    caps = np.asarray(capacities)
    too_long = (lengths > caps).any(axis=1)
    empty = ~lengths.any(axis=1)
    expected = set(np.flatnonzero(~empty & ~(too_long & (long == "drop"))).tolist())
    assert set(rows.sequences.tolist()) == expected
    assert packed.empty == empty.sum() and packed.sequences == len(lengths)
    assert packed.dropped_long == ((too_long & ~empty).sum() if long == "drop" else 0)
    covered(rows, lengths)
    assert (rows.stops >= rows.starts).all()
    per_row = (
        np.add.reduceat(rows.stops - rows.starts, rows.offsets[:-1], axis=0)
        if rows.count
        else np.zeros((0, len(caps)))
    )
    assert (per_row <= caps).all()
    assert (rows.sizes >= 1).all()
    if method != "concat":  # a sequence that fits a row is never cut
        pieces = np.bincount(rows.sequences, minlength=len(lengths))
        assert (pieces[~too_long & ~empty] == 1).all()
    else:  # concat: every row but the last is full in some key
        assert (per_row[:-1] == caps).any(axis=1).all()
        assert rows.sequences.tolist() == sorted(rows.sequences.tolist())  # in the epoch's order
    again = plan_packing(lengths, options)
    assert again.rows.offsets.tolist() == rows.offsets.tolist()


@pytest.mark.skipif(compiled is None, reason="the extension is not built")
@settings(max_examples=300, deadline=None)
@given(epoch=epochs(), method=st.sampled_from(METHODS), buffer_size=st.integers(1, 8))
def test_the_compiled_packer_makes_the_numpy_packers_rows(
    epoch: tuple[np.ndarray, tuple[int, ...]], method: str, buffer_size: int
) -> None:
    lengths, capacities = epoch
    options = PackOptions(capacities, method, buffer_size, split_long=True)  # type: ignore[arg-type]
    native, numpy = plan_packing(lengths, options), plan_packing(lengths, options, native=False)
    for name in ("offsets", "sequences", "starts", "stops"):
        assert np.array_equal(getattr(native.rows, name), getattr(numpy.rows, name)), name


def _classic_first_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """First-fit with every row open (the textbook algorithm), rows in the order they opened."""
    rows: list[list[int]] = []
    room: list[int] = []
    for item, length in enumerate(lengths):
        for row, left in enumerate(room):
            if length <= left:
                rows[row].append(item)
                room[row] -= length
                break
        else:
            rows.append([item])
            room.append(capacity - length)
    return rows


def _rows(groups: Groups) -> list[list[int]]:
    return [groups.sequences[a:b].tolist() for a, b in zip(groups.offsets[:-1], groups.offsets[1:])]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), max_size=80), st.integers(20, 30))
def test_first_fit_with_a_window_of_every_row_is_textbook_first_fit(
    lengths: list[int], capacity: int
) -> None:
    groups = pack_items(np.asarray(lengths).reshape(-1, 1), (capacity,), "first_fit", max(1, len(lengths)))
    # The same rows (a full row closes early, so the order of rows differs): as sets of items.
    assert sorted(_rows(groups)) == sorted(_classic_first_fit(lengths, capacity))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), max_size=80), st.integers(20, 30))
def test_a_window_of_one_row_is_next_fit(lengths: list[int], capacity: int) -> None:
    expected: list[list[int]] = []
    left = 0
    for item, length in enumerate(lengths):
        if not expected or length > left:
            expected.append([])
            left = capacity
        expected[-1].append(item)
        left -= length
    for method in ("first_fit", "best_fit"):
        groups = pack_items(np.asarray(lengths).reshape(-1, 1), (capacity,), method, 1)  # type: ignore[arg-type]
        assert _rows(groups) == [row for row in expected if row], method


def test_best_fit_takes_the_fullest_row_that_fits() -> None:
    groups = pack_items(np.asarray([[5], [8], [2]]), (10,), "best_fit", 4)
    assert _rows(groups) == [[1, 2], [0]]  # 2 goes beside 8 (the fuller), not beside 5
    groups = pack_items(np.asarray([[5], [8], [2]]), (10,), "first_fit", 4)
    assert _rows(groups) == [[0, 2], [1]]


def test_split_long_cuts_pieces_of_a_row_and_places_the_last_like_a_sequence() -> None:
    packed = plan_packing([[25], [3]], PackOptions((10,), "first_fit", 4, split_long=True))
    pieces = sorted(
        zip(
            packed.rows.sequences.tolist(),
            packed.rows.starts[:, 0].tolist(),
            packed.rows.stops[:, 0].tolist(),
        )
    )
    assert pieces == [(0, 0, 10), (0, 10, 20), (0, 20, 25), (1, 0, 3)]
    assert packed.split == 1 and packed.rows.count == 3  # the last piece (5) shares a row with 3
    with pytest.raises(ValueError, match="more than a row"):
        plan_packing([[25], [3]], PackOptions((10,)))
    with pytest.raises(ValueError, match="either cut or left out"):
        PackOptions((10,), split_long=True, drop_long=True)
    with pytest.raises(ValueError, match="method="):
        PackOptions((10,), "next_fit")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="buffer_size=0"):
        PackOptions((10,), buffer_size=0)


def test_concat_cuts_each_key_where_its_room_ends() -> None:
    rows = plan_packing([[6, 2], [6, 3]], PackOptions((8, 4), "concat")).rows
    assert _rows(rows) == [[0, 1], [1]]  # key 1 fills first: row 0 closes at 2 + 2 targets
    assert rows.starts.tolist() == [[0, 0], [0, 0], [2, 2]]
    assert rows.stops.tolist() == [[6, 2], [2, 2], [6, 3]]


def _streamed_buckets(lengths: list[int], boundaries: list[int], sizes: list[int]) -> list[list[int]]:
    """tf.data's bucket_by_sequence_length as a stream: batches as they fill, then the rest."""
    buckets: list[list[int]] = [[] for _ in sizes]
    out = []
    for item, length in enumerate(lengths):
        bucket = sum(length >= b for b in boundaries)
        buckets[bucket].append(item)
        if len(buckets[bucket]) == sizes[bucket]:
            out.append(buckets[bucket])
            buckets[bucket] = []
    return out + [b for b in buckets if b]


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.lists(st.integers(0, 60), min_size=2, max_size=2), max_size=120),
    boundaries=st.lists(st.integers(1, 60), max_size=4, unique=True).map(sorted),
    data=st.data(),
)
def test_buckets_are_tf_datas_stream_of_batches(
    lengths: list[list[int]], boundaries: list[int], data: st.DataObject
) -> None:
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=len(boundaries) + 1, max_size=len(boundaries) + 1))
    planned = plan_buckets(
        np.asarray(lengths, dtype=np.int64).reshape(-1, 2), BucketOptions(tuple(boundaries), tuple(sizes))
    )
    expected = _streamed_buckets([max(pair) for pair in lengths], boundaries, sizes)
    assert _rows(planned.batches) == expected
    assert planned.buckets.tolist() == [sum(max(lengths[b[0]]) >= x for x in boundaries) for b in expected]
    assert (
        planned.batches.stops == np.asarray(lengths, dtype=np.int64).reshape(-1, 2)[planned.batches.sequences]
    ).all()


def test_bucket_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="increasing positive"):
        BucketOptions((10, 10), (1, 1, 1))
    with pytest.raises(ValueError, match="one per bucket"):
        BucketOptions((10, 20), (4, 4))
