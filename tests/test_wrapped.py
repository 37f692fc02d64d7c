"""The layouts that pass Accelerate's wrappers intact (torch_tfrecord.data.frameworks.wrapped): invariants,
and a model of the DataLoaderDispatcher's cut (concatenate world_size batches, slice them)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.data.frameworks.wrapped import shard_runs, world_items, wrapped_len


def _dispatched(stream: list[tuple[int, int]], world: int, batch: int) -> list[list[tuple[int, int]]]:
    """What each rank receives from accelerate's DataLoaderDispatcher (split_batches=False,
    drop_last=False) when rank 0's loader yields ``stream`` in batches of ``batch``."""
    batches = [stream[i : i + batch] for i in range(0, len(stream), batch)]
    received: list[list[tuple[int, int]]] = [[] for _ in range(world)]
    for first in range(0, len(batches), world):
        joined = [item for b in batches[first : first + world] for item in b]
        size = len(joined) // world
        assert size * world == len(joined)  # else the dispatcher would add samples of its first batch
        for rank in range(world):
            received[rank] += joined[rank * size : (rank + 1) * size]
    return received


@settings(max_examples=200, deadline=None)
@given(units=st.integers(0, 60), world=st.integers(1, 5), run=st.integers(1, 12))
def test_the_dispatcher_hands_each_rank_exactly_its_own_units(units: int, world: int, run: int) -> None:
    ranks, items = world_items(np.arange(world * units), units, world, run)
    stream = list(zip(ranks.tolist(), items.tolist(), strict=True))
    assert sorted(stream) == [(r, u) for r in range(world) for u in range(units)]
    received = _dispatched(stream, world, run)
    for rank in range(world):
        assert received[rank] == [(rank, u) for u in range(units)]  # in the rank's own order


def test_shard_runs_sit_where_the_shard_keeps_them_and_pad_the_last() -> None:
    samples = iter([{"i": i, "_padding": False} for i in range(5)])
    out = list(shard_runs(samples, 2, before=2, after=0, padding_key="_padding"))
    assert out[:4] == [None, None, {"i": 0, "_padding": False}, {"i": 1, "_padding": False}]
    assert out[-2:] == [{"i": 4, "_padding": False}, {"i": 4, "_padding": True}]
    assert len(out) == 12


def test_wrapped_len() -> None:
    assert wrapped_len(21, 2, False, None) == 21
    assert wrapped_len(21, 2, True, None) == 42  # the dispatcher divides by the world size
    assert wrapped_len(202, 2, False, 10) == 420  # IterableDatasetShard: ceil(202/10) x 10 x 2
    assert wrapped_len(21, 1, True, None) == 21
