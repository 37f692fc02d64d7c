"""order.py: the epoch permutation, the split over ranks and workers, and resuming, by invariants."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.data.order import permutation as native_order
from torch_tfrecord.data.order.permutation import permute
from torch_tfrecord.data.order.plan import (
    EpochPlan,
    Progress,
    WorkerSlice,
    block_size,
    merge_progress,
    rest_of_epoch,
)
from torch_tfrecord.support.seeds import mix_seed


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 15, 16, 17, 1000, 4097, 65_537])
def test_permute_is_a_permutation(n: int) -> None:
    out = permute(np.arange(n), n, seed=7, epoch=3)
    assert sorted(out.tolist()) == list(range(n))


def test_permute_depends_on_seed_and_epoch_only() -> None:
    n = 10_000
    base = permute(np.arange(n), n, 1, 0)
    assert np.array_equal(base, permute(np.arange(n), n, 1, 0))
    assert not np.array_equal(base, permute(np.arange(n), n, 2, 0))
    assert not np.array_equal(base, permute(np.arange(n), n, 1, 1))
    # Any slice of positions gives the same values as the whole: a function of the position.
    assert np.array_equal(permute(np.arange(5000, 5100), n, 1, 0), base[5000:5100])
    # Shuffled, not a rotation or near-identity: few fixed points, neighbours scattered.
    assert (base == np.arange(n)).sum() < 20
    assert np.abs(np.diff(base)).mean() > n / 10


def test_permute_a_billion_records_in_constant_memory() -> None:
    n = 1_000_000_000
    tracemalloc.start()
    try:
        out = permute(np.arange(123_456_000, 123_457_000), n, seed=5, epoch=9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # a few arrays of 1,000 values, nothing of size n
    assert len(set(out.tolist())) == 1000 and out.min() >= 0 and out.max() < n


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 2**62), st.integers(0, 2**63 - 1), st.integers(1, 4096), st.data())
def test_the_compiled_permutation_is_the_numpy_one(
    n: int, seed: int, window: int, data: st.DataObject
) -> None:
    if native_order._native is None:
        pytest.skip("the extension is not built")
    positions = np.asarray(
        data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50)), dtype=np.uint64
    )
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [mix_seed(seed, round_) for round_ in range(4)]
    compiled = native_order._walk(positions, half_bits, keys, n)
    assert np.array_equal(compiled, native_order._walk(positions, half_bits, keys, n, native=False))
    if half_bits <= 31:  # the compiled scalar loop too, where the AVX-512 one ran
        assert np.array_equal(compiled, _scalar_walk(positions, half_bits, keys, n))
    windows = (positions % np.uint64(window)).astype(np.uint64)
    within = positions % np.uint64(min(window, n))
    half = max(1, ((min(window, n) - 1).bit_length() + 1) // 2)
    assert np.array_equal(
        native_order._walk(within, half, keys, min(window, n), windows),
        native_order._walk(within, half, keys, min(window, n), windows, native=False),
    )


def _scalar_walk(positions: np.ndarray, half_bits: int, keys: list[int], n: int) -> np.ndarray:
    values = positions.astype(np.uint64)
    key_words = np.asarray(keys, dtype=np.uint64).view(np.int64)
    native_order._native.feistel(values.view(np.int64), half_bits, key_words, n, None, False)
    return values


@pytest.mark.parametrize("n", [2, 7, 80_000, 160_000, 1_000_003, 4**15])
def test_the_vectorised_permutation_is_the_scalar_one_and_numpys(n: int) -> None:
    """Thousands of values (eight a vector, the rest one by one), long walks (n just above a
    power of four) and short ones: the AVX-512 loop, the scalar one and numpy agree."""
    if native_order._native is None:
        pytest.skip("the extension is not built")
    positions = np.random.default_rng(n).integers(0, n, 10_007).astype(np.uint64)
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [mix_seed(n, round_) for round_ in range(4)]
    compiled = native_order._walk(positions, half_bits, keys, n)
    assert np.array_equal(compiled, _scalar_walk(positions, half_bits, keys, n))
    assert np.array_equal(compiled, native_order._walk(positions, half_bits, keys, n, native=False))


def test_the_compiled_permutation_refuses_values_outside_its_range() -> None:
    ext = native_order._native
    if ext is None:
        pytest.skip("the extension is not built")
    keys = np.array([1, 2, 3, 4], dtype=np.int64)
    with pytest.raises(ValueError, match=r"outside \[0, limit\)"):  # its walk might never end
        ext.feistel(np.array([10], dtype=np.int64), 2, keys, 10, None)
    with pytest.raises(ValueError, match="one window per value"):
        ext.feistel(np.array([1, 2], dtype=np.int64), 2, keys, 10, np.zeros(1, dtype=np.int64))


def test_the_order_of_a_seed_is_the_same_from_version_to_version() -> None:
    # Saved states name positions of this order: it must never change.
    assert permute(np.arange(8), 1000, 1, 0).tolist() == [225, 274, 965, 199, 891, 694, 684, 673]
    assert native_order.permute_windows(np.arange(8), 20, 8, 1, 0).tolist() == [3, 5, 2, 6, 4, 0, 1, 7]


def test_permute_rejects_positions_outside() -> None:
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        permute([10], 10, 0)


def test_mix_seed_is_stable_and_spreads() -> None:
    assert mix_seed(1, 2, 3) == mix_seed(1, 2, 3)
    assert len({mix_seed(0, 0, i) for i in range(1000)}) == 1000
    assert 0 <= mix_seed(-1, 2**70) < 2**63


def _epoch_samples(plan_args: dict, world_size: int, epoch: int) -> list[tuple[list[int], list[bool]]]:
    out = []
    for rank in range(world_size):
        plan = EpochPlan(**plan_args, world_size=world_size, rank=rank)
        ids, padding = plan.records(np.arange(plan.samples_per_rank), epoch)
        out.append((ids.tolist(), padding.tolist()))
    return out


@settings(max_examples=300, deadline=None)
@given(
    shard_sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6),
    world_size=st.integers(1, 5),
    batch_size=st.one_of(st.none(), st.integers(1, 9)),
    drop_last=st.booleans(),
    shuffle=st.sampled_from(["global", "shards", False, "block:1", "block:3", "block:16", "block:1000"]),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 50),
)
def test_every_record_once_and_equal_counts(
    shard_sizes: list[int],
    world_size: int,
    batch_size: int | None,
    drop_last: bool,
    shuffle: str | bool,
    seed: int,
    epoch: int,
) -> None:
    args = {
        "shard_sizes": tuple(shard_sizes),
        "batch_size": batch_size,
        "drop_last": drop_last,
        "shuffle": shuffle,
        "seed": seed,
    }
    plan = EpochPlan(**args, world_size=world_size)  # type: ignore[arg-type]
    n, unit = sum(shard_sizes), batch_size or 1
    per_rank = _epoch_samples(args, world_size, epoch)
    counts = {len(ids) for ids, _ in per_rank}
    assert counts == {plan.samples_per_rank}  # equal samples, hence equal batches
    assert plan.samples_per_rank % unit == 0
    real = [i for ids, pads in per_rank for i, p in zip(ids, pads, strict=True) if not p]
    padded = [i for ids, pads in per_rank for i, p in zip(ids, pads, strict=True) if p]
    assert len(real) == len(set(real))  # disjoint across ranks, no repeats
    if drop_last:
        assert not padded
        assert n - len(real) == plan.dropped < world_size * unit
    else:
        assert sorted(real) == list(range(n))  # exact coverage
        assert len(padded) == plan.padding < world_size * unit
        assert set(padded) <= set(range(n))
    # Pure: the same arguments give the same order.
    assert per_rank == _epoch_samples(args, world_size, epoch)


def test_uneven_shards_over_4_ranks_and_3_workers() -> None:
    """The issue's case: shards of 1, 7 and 1000 records, 4 ranks x 3 workers, batches of 8."""
    seen: collections.Counter[int] = collections.Counter()
    batches_per_rank = []
    for rank in range(4):
        plan = EpochPlan((1, 7, 1000), world_size=4, rank=rank, batch_size=8, drop_last=False, seed=3)
        batches = 0
        for worker in range(3):
            slice_ = WorkerSlice(3, worker, 1)
            for block in slice_.items(plan.units_per_rank):
                for unit in block.tolist():
                    ids, padding = plan.records(plan.unit_positions([unit]), epoch=0)
                    assert len(ids) == 8
                    seen.update(ids[~padding].tolist())
                    batches += 1
        batches_per_rank.append(batches)
    assert batches_per_rank == [32] * 4  # ceil(1008 / 32)
    assert sorted(seen) == list(range(1008)) and set(seen.values()) == {1}


def test_drop_last_drops_other_records_each_epoch() -> None:
    plan = EpochPlan((10, 13), world_size=2, batch_size=4, seed=1)
    assert plan.dropped == 7
    dropped = []
    for epoch in range(5):
        kept = {
            i
            for r in range(2)
            for i in _epoch_samples({"shard_sizes": (10, 13), "batch_size": 4, "seed": 1}, 2, epoch)[r][0]
        }
        dropped.append(frozenset(set(range(23)) - kept))
    assert all(len(d) == 7 for d in dropped)
    assert len(set(dropped)) > 1


def test_epoch_order_changes_with_epoch_and_seed() -> None:
    plan = EpochPlan((100, 100), seed=0)
    orders = [plan.order(np.arange(200), epoch).tolist() for epoch in range(3)]
    assert len({tuple(o) for o in orders}) == 3
    assert (
        plan.order(np.arange(200), 0).tolist()
        != EpochPlan((100, 100), seed=1).order(np.arange(200), 0).tolist()
    )


def test_shards_shuffle_reads_each_shard_in_order() -> None:
    sizes = (5, 0, 3, 8, 1)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    orders = set()
    for epoch in range(6):
        order = EpochPlan(sizes, shuffle="shards", seed=4).order(np.arange(17), epoch).tolist()
        assert sorted(order) == list(range(17))
        runs = [
            list(g)
            for _, g in itertools.groupby(order, key=lambda i: int(np.searchsorted(starts, i, "right")))
        ]
        assert len(runs) == 4  # one contiguous run per non-empty shard
        for run in runs:
            assert run == list(range(run[0], run[0] + len(run)))
        orders.add(tuple(order))
    assert len(orders) > 1


@settings(max_examples=200, deadline=None)
@given(
    shard_sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    window=st.integers(1, 70),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 50),
)
def test_block_shuffle_permutes_within_windows_of_shuffled_shards(
    shard_sizes: list[int], window: int, seed: int, epoch: int
) -> None:
    sizes = tuple(shard_sizes)
    n = sum(sizes)
    block = EpochPlan(sizes, shuffle=f"block:{window}", seed=seed).order(np.arange(n), epoch)
    shards = EpochPlan(sizes, shuffle="shards", seed=seed).order(np.arange(n), epoch)
    assert sorted(block.tolist()) == list(range(n))  # a permutation
    for start in range(0, n, window):  # each window holds exactly the shard-shuffled window's records
        assert sorted(block[start : start + window].tolist()) == sorted(
            shards[start : start + window].tolist()
        )
    # A function of the position: any slice gives the same values as the whole, and it is pure.
    if n:
        middle = np.arange(n // 3, n)
        assert np.array_equal(
            EpochPlan(sizes, shuffle=f"block:{window}", seed=seed).order(middle, epoch), block[middle]
        )


def test_block_shuffle_mixes_within_windows_and_differs_per_epoch() -> None:
    sizes = (1000, 1000, 1000)
    plan = EpochPlan(sizes, shuffle="block:100", seed=1)
    shards = EpochPlan(sizes, shuffle="shards", seed=1)
    positions = np.arange(3000)
    first, second = plan.order(positions, 0), plan.order(positions, 1)
    assert not np.array_equal(first, second)
    # Records move within their window (at most 99 places from the shard-shuffled order) ...
    place = np.empty(3000, dtype=np.int64)
    place[shards.order(positions, 0)] = positions
    moved = np.abs(place[first] - positions)
    assert moved.max() < 100 and moved.mean() > 20  # ... and do move (a window's mean is ~33)
    # Consecutive windows of one shard are read one after the other (sequential reads).
    assert np.array_equal(np.sort(first[:100]), np.sort(shards.order(positions, 0)[:100]))


def test_block_size_parses_and_refuses() -> None:
    assert block_size("block:64") == 64 and block_size("global") is None and block_size(False) is None
    for bad in ("block", "block:0", "block:-3", "block:x", "blocks:4", True):
        with pytest.raises(ValueError, match="block:K"):
            block_size(bad)  # type: ignore[arg-type]


def test_unshuffled_order_is_file_order() -> None:
    plan = EpochPlan((3, 4), shuffle=False, world_size=2, rank=1, drop_last=False)
    ids, padding = plan.records(np.arange(plan.samples_per_rank), epoch=5)
    assert ids.tolist() == [4, 5, 6, 0]  # 7 records over 2 ranks: rank 1 ends with a repeat
    assert padding.tolist() == [False, False, False, True]


def test_plan_validates_itself() -> None:
    with pytest.raises(ValueError, match="rank"):
        EpochPlan((1,), world_size=2, rank=2)
    with pytest.raises(ValueError, match="batch_size"):
        EpochPlan((1,), batch_size=0)
    with pytest.raises(ValueError, match="shuffle"):
        EpochPlan((1,), shuffle="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_id"):
        WorkerSlice(2, 2, 1)
    with pytest.raises(ValueError, match="sorted"):
        Progress(3, (2,))


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(0, 80),
    first=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    second=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    data=st.data(),
)
def test_workers_split_the_remaining_units_and_merge_back(
    total: int, first: tuple[int, int], second: tuple[int, int], data: st.DataObject
) -> None:
    """Stop any worker anywhere, merge, resume with another split: nothing lost, nothing twice."""
    consumed: set[int] = set()
    progress = Progress()
    for num_workers, chunk in (first, second):
        remaining = progress.remaining(total)
        slices = [WorkerSlice(num_workers, w, chunk) for w in range(num_workers)]
        assigned = [
            progress.units(np.concatenate([*s.items(remaining, block=3), np.empty(0, np.int64)]))
            for s in slices
        ]
        everything = sorted(int(u) for a in assigned for u in a)
        assert everything == sorted(set(range(total)) - consumed)  # a partition of what is left
        yielded = [data.draw(st.integers(0, len(a))) for a in assigned]
        for units, count in zip(assigned, yielded, strict=True):
            consumed.update(int(u) for u in units[:count])
        progress = merge_progress(progress, total, slices[0], yielded)
        assert set(range(progress.start)) | set(progress.done) == consumed
    single = data.draw(st.integers(0, progress.remaining(total)))
    merged = merge_progress(progress, total, None, [single])
    assert len(set(range(merged.start)) | set(merged.done)) == len(consumed) + single


def test_worker_items_can_skip_what_was_handed_out() -> None:
    slice_ = WorkerSlice(2, 1, 3)
    assert np.concatenate(list(slice_.items(20))).tolist() == [3, 4, 5, 9, 10, 11, 15, 16, 17]
    assert np.concatenate(list(slice_.items(20, skip=4))).tolist() == [10, 11, 15, 16, 17]
    assert slice_.count(20) == 9 and WorkerSlice(2, 0, 3).count(20) == 11


def _rank_records(plan: EpochPlan, epoch: int, units: list[int]) -> tuple[list[int], list[bool]]:
    if not units:
        return [], []
    ids, padding = plan.records(plan.unit_positions(units), epoch)
    return ids.tolist(), padding.tolist()


@settings(max_examples=300, deadline=None)
@given(
    shard_sizes=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    worlds=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    batch_size=st.one_of(st.none(), st.integers(1, 5)),
    drop_last=st.booleans(),
    shuffle=st.sampled_from(["global", "shards", False]),
    samples_per_epoch=st.one_of(st.none(), st.integers(1, 90)),
    epoch=st.integers(0, 5),
    data=st.data(),
)
def test_resume_on_other_world_sizes_reads_the_rest_once(
    shard_sizes: list[int],
    worlds: list[int],
    batch_size: int | None,
    drop_last: bool,
    shuffle: str | bool,
    samples_per_epoch: int | None,
    epoch: int,
    data: st.DataObject,
) -> None:
    """Stop every rank anywhere (with units out of order, as workers leave them), compute the rest,
    split it over another number of ranks, stop again ...: the epoch's positions are read once."""
    if samples_per_epoch is not None and sum(shard_sizes) == 0:
        return
    base = EpochPlan(
        tuple(shard_sizes), batch_size=batch_size, drop_last=drop_last, shuffle=shuffle,  # type: ignore[arg-type]
        seed=11, samples_per_epoch=samples_per_epoch,
    )  # fmt: skip
    full = base.epoch_size
    stream = base.stream(np.arange(full) + epoch * full).tolist()  # the epoch's record at each position
    read: list[int] = []  # positions read, by any world
    rest = None
    left_out = 0
    for step, world_size in enumerate(worlds):
        plan = dataclasses.replace(base, world_size=world_size, rest=rest)
        last = step == len(worlds) - 1
        progress, counts = [], set()
        for rank in range(world_size):
            ranked = dataclasses.replace(plan, rank=rank)
            units = list(range(ranked.units_per_rank))
            if last:
                start, done = len(units), []
            else:
                start = data.draw(st.integers(0, len(units)))
                done = sorted(
                    data.draw(st.sets(st.sampled_from(units[start + 1 :]))) if units[start + 1 :] else []
                )
            taken = list(range(start)) + done
            ids, padding = _rank_records(ranked, epoch, taken)
            indices = np.asarray(ranked.unit_positions(taken), np.int64) + rank * ranked.samples_per_rank
            positions = ranked.positions(indices % max(1, ranked.num_positions)).tolist()
            real = [p for p, pad in zip(positions, padding, strict=True) if not pad]
            assert ids == [stream[p] for p in positions]
            read += real
            progress.append(Progress(start, tuple(done)))
            counts.add(ranked.units_per_rank)
        assert len(counts) == 1  # every rank the same number of units
        left_out += plan.dropped
        if drop_last:
            assert plan.dropped < world_size * plan.unit
        rest = rest_of_epoch(plan, progress)
        assert sum(b - a for a, b in rest) <= plan.num_positions
    assert len(read) == len(set(read))  # nothing twice
    if drop_last:
        assert len(read) + left_out == full  # what is left out is what each world dropped
    else:
        assert sorted(read) == list(range(full))  # everything once


def test_rest_of_epoch_stays_small_for_a_billion_records() -> None:
    plan = EpochPlan((10**9,), world_size=64, batch_size=512, seed=1)
    progress = [Progress(1000 + r, (1002 + r, 1005 + r)) for r in range(64)]
    rest = rest_of_epoch(plan, progress)
    assert len(rest) <= 3 * 64
    resumed = dataclasses.replace(plan, world_size=48, rank=47, rest=rest)
    ids, padding = resumed.records(np.arange(resumed.samples_per_rank - 512, resumed.samples_per_rank), 0)
    assert len(set(ids.tolist())) == 512 and not padding.any()


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 50),
    samples_per_epoch=st.integers(1, 120),
    shuffle=st.sampled_from(["global", "shards", False]),
    epochs=st.integers(1, 8),
)
def test_samples_per_epoch_continues_through_the_passes(
    n: int, samples_per_epoch: int, shuffle: str | bool, epochs: int
) -> None:
    plan = EpochPlan((n // 2, n - n // 2), shuffle=shuffle, samples_per_epoch=samples_per_epoch, seed=3)  # type: ignore[arg-type]
    assert plan.units_per_rank == samples_per_epoch
    seen = [i for e in range(epochs) for i in plan.records(np.arange(samples_per_epoch), e)[0].tolist()]
    for first in range(0, len(seen), n):  # each pass: every record once before any repeats
        chunk = seen[first : first + n]
        assert len(set(chunk)) == len(chunk)
    for first in range(0, len(seen) - n + 1, n):  # each whole pass: every record
        assert sorted(seen[first : first + n]) == list(range(n))
    # Pure: the same epoch again gives the same samples.
    assert (
        plan.records(np.arange(samples_per_epoch), epochs)[0].tolist()
        == plan.records(np.arange(samples_per_epoch), epochs)[0].tolist()
    )


def test_short_epochs_go_on_through_the_pass_and_longer_ones_start_another() -> None:
    short = EpochPlan((10,), samples_per_epoch=4, seed=2)
    seen = [short.records(np.arange(4), e)[0].tolist() for e in range(5)]
    flat = [i for epoch in seen for i in epoch]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert flat[:10] != flat[10:20]  # the second pass is another permutation
    assert flat[:10] == EpochPlan((10,), seed=2).records(np.arange(10), 0)[0].tolist()  # pass 0 = epoch 0
    long = EpochPlan((10,), samples_per_epoch=25, world_size=2, rank=1, batch_size=4, seed=2)
    assert long.units_per_rank == 3 and long.dropped == 1
    with pytest.raises(ValueError, match="samples_per_epoch"):
        EpochPlan((0,), samples_per_epoch=5)
