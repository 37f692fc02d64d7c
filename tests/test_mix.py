"""Weighted mixing: the pure schedule (order/mixing.py) by invariants; MixedDataset over ranks, workers,
resumes."""

from __future__ import annotations

import collections
import itertools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import torch_tfrecord as tt
from torch_tfrecord.data.order.mixing import MixSchedule, locate, quotas

SIZES = {"web": 30, "books": 7, "code": 12}


@settings(max_examples=300, deadline=None)
@given(weights=st.lists(st.integers(0, 20), min_size=1, max_size=5), total=st.integers(0, 500))
def test_quotas_add_up_within_one_of_the_shares(weights: list[int], total: int) -> None:
    if not any(weights):
        with pytest.raises(ValueError, match="not all 0"):
            quotas(weights, total)
        return
    counts = quotas(weights, total)
    assert sum(counts) == total
    for weight, count in zip(weights, counts, strict=True):
        assert abs(count - Fraction(weight * total, sum(weights))) < 1
    assert counts == quotas(weights, total)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=5).filter(any))
def test_every_place_holds_one_item_each_source_in_its_order(counts: list[int]) -> None:
    total = sum(counts)
    sources, items = locate(np.arange(total), counts)
    pairs = list(zip(sources.tolist(), items.tolist(), strict=True))
    assert sorted(pairs) == [(s, k) for s, c in enumerate(counts) for k in range(c)]  # a bijection
    for source, count in enumerate(counts):
        assert [k for s, k in pairs if s == source] == list(range(count))  # in the source's order
        for end in range(total + 1):  # every stretch from the start holds it in about its share
            assert abs(sum(1 for s, _ in pairs[:end] if s == source) - Fraction(end * count, total)) <= len(
                counts
            )
    # Any slice gives what the whole gives: a function of the place.
    middle = np.arange(total // 3, total)
    assert locate(middle, counts)[0].tolist() == sources[total // 3 :].tolist()


def test_locate_a_billion_places_is_cheap() -> None:
    counts = quotas([0.5, 0.3, 0.2], 10**9)
    sources, items = locate(np.arange(10**9 - 1000, 10**9), counts)
    assert collections.Counter(sources.tolist()) == {0: 500, 1: 300, 2: 200}
    assert items[sources == 0].tolist() == list(range(counts[0] - 500, counts[0]))


def test_schedule_goes_on_from_where_it_started() -> None:
    schedule = MixSchedule((3, 2), (10, 4), origin=5)
    assert schedule.offsets_at(5) == (10, 4) and schedule.offsets_at(7) == (16, 8)
    with pytest.raises(ValueError, match="before epoch 5"):
        schedule.offsets_at(4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mix")
    for name, size in SIZES.items():
        with tt.ExampleWriter(path / f"{name}.tfrecord") as writer:
            for i in range(size):
                writer.write({"id": i, "text": f"{name} {i}".encode()})
    return path


def _sources(folder: Path) -> dict[str, tt.TFRecordDataset]:
    return {
        "web": tt.TFRecordDataset(folder / "web.tfrecord", spec={"id": "int"}, seed=1),
        "books": tt.TFRecordDataset(folder / "books.tfrecord", spec={"id": "int", "text": "bytes"}, seed=2),
        "code": tt.TFRecordDataset(folder / "code.tfrecord", spec={"id": "int"}, shuffle=False),
    }


WEIGHTS = {"web": 5, "books": 3, "code": 2}


def _pairs(batch: dict[str, Any], names: tuple[str, ...]) -> list[tuple[str, int, bool]]:
    """(source, record id, padding) of each place of a mixed batch, in the batch's order."""
    parts = {
        name: iter(zip(b["_record_id"].tolist(), b["_padding"].tolist(), strict=True))
        for name, b in batch.items()
        if name != "_source"
    }
    return [(names[s], *next(parts[names[s]])) for s in batch["_source"].tolist()]


def _epoch(mixed: tt.MixedDataset, workers: int, steps: int | None = None) -> list[tuple[str, int, bool]]:
    loader = DataLoader(mixed, batch_size=None, num_workers=workers)
    return [p for batch in itertools.islice(loader, steps) for p in _pairs(batch, mixed.names)]


def test_exact_proportions_equal_batches_and_each_source_once_per_pass(folder: Path) -> None:
    epochs, per_epoch = 4, 40  # 20 web, 12 books, 8 code per epoch
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for epoch in range(epochs):
        lengths, places = [], []
        for rank in range(2):
            mixed = tt.mix(
                _sources(folder), WEIGHTS, samples_per_epoch=per_epoch, batch_size=4, rank=rank, world_size=2
            )
            mixed.set_epoch(epoch)
            lengths.append(len(mixed))
            got = _epoch(mixed, workers=rank + 1)
            assert len(got) == 4 * len(mixed)
            places += got
        assert lengths == [5, 5]
        assert collections.Counter(s for s, _, _ in places) == {"web": 20, "books": 12, "code": 8}
        for source, record, _ in places:
            seen[source].append(record)
    for source, consumed in seen.items():  # each source's passes: every record once, then again
        size = SIZES[source]
        full, extra = divmod(len(consumed), size)
        counts = collections.Counter(consumed)
        assert (
            set(counts.values()) <= {full, full + 1} and sum(v == full + 1 for v in counts.values()) == extra
        )
    # "code" is unshuffled: its records come in file order, pass after pass.
    assert sorted(seen["code"][:12]) == list(range(12))


def test_a_mix_under_a_loader_without_batch_size_uses_the_fast_convert(folder: Path) -> None:
    from torch_tfrecord.data.transport.fast_convert import convert

    mixed = tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=40, batch_size=4)
    loader = DataLoader(mixed, batch_size=None)
    iterator = iter(loader)
    first = next(iterator)  # the mix's __iter__ runs at the first batch (a generator)
    assert iterator._dataset_fetcher.collate_fn is convert  # type: ignore[attr-defined]
    assert len(first["_source"]) == 4


def test_sample_mode_tags_the_source_and_is_deterministic(folder: Path) -> None:
    mixed = tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=20)
    mixed.set_epoch(3)
    samples = list(mixed)
    names = [mixed.names[s["_source"]] for s in samples]  # the source's number in names, as in batches
    assert all(type(s["_source"]) is int for s in samples)
    assert collections.Counter(names) == {"web": 10, "books": 6, "code": 4}
    assert all(
        s["text"] == [f"books {int(s['id'])}".encode()]
        for s, name in zip(samples, names, strict=True)
        if name == "books"
    )
    again = tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=20)
    again.set_epoch(3)
    assert [(s["_source"], s["_record_id"]) for s in again] == [
        (s["_source"], s["_record_id"]) for s in samples
    ]
    batched = tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=20, batch_size=5)
    batched.set_epoch(3)
    expected = [(name, s["_record_id"]) for s, name in zip(samples, names, strict=True)]
    assert [(s, r) for s, r, _ in _epoch(batched, 0)] == expected


def test_resume_on_another_world_size_and_with_new_weights(folder: Path) -> None:
    def make(rank: int, world: int, weights: dict[str, int] = WEIGHTS) -> tt.MixedDataset:
        return tt.mix(
            _sources(folder),
            weights,
            samples_per_epoch=48,
            batch_size=4,
            drop_last=False,
            rank=rank,
            world_size=world,
        )

    whole = [p for rank in range(2) for p in _epoch(make(rank, 2), 0)]  # epoch 0, uninterrupted
    seen, states = [], []
    for rank in range(2):
        mixed = make(rank, 2)
        seen += _epoch(mixed, 1, steps=2)
        states.append(mixed.state_dict(consumed=2))
    json.dumps(states)
    lengths, after = [], []
    for rank in range(3):
        mixed = make(rank, 3)
        mixed.load_state_dict(states)
        lengths.append(len(mixed))
        after += [p for p in _epoch(mixed, 2) if not p[2]]
    assert len(set(lengths)) == 1
    assert sorted(seen + after) == sorted(whole)  # the epoch, each place once

    # New weights at a resume: the saved epoch ends as planned, the next has the new shares,
    # and each source goes on through its pass where it stopped.
    new = {"web": 1, "books": 0, "code": 1}
    mixed = make(0, 1, new)
    mixed.load_state_dict(states)
    rest = [p for p in _epoch(mixed, 0) if not p[2]]
    assert sorted(rest) == sorted(after)
    mixed.set_epoch(1)
    following = _epoch(mixed, 0)
    assert collections.Counter(s for s, _, _ in following) == {"web": 24, "code": 24}
    before = [r for s, r, _ in whole if s == "code"]  # 10 of code's 12 in epoch 0 (shuffle=False)
    assert sorted(before) == list(range(10))
    assert [r for s, r, _ in following if s == "code"][:2] == [10, 11]  # its pass goes on


def test_a_mix_checks_its_arguments(folder: Path) -> None:
    with pytest.raises(ValueError, match="weights name"):
        tt.mix(_sources(folder), {"web": 1})
    with pytest.raises(ValueError, match="give them to the mix"):
        tt.mix({"web": tt.TFRecordDataset(folder / "web.tfrecord", batch_size=2)})
    with pytest.raises(ValueError, match="not all 0"):
        tt.mix(_sources(folder), {"web": 0, "books": 0, "code": 0})
    mixed = tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=20)
    other = tt.mix(
        {**_sources(folder), "code": tt.TFRecordDataset(folder / "code.tfrecord", seed=9)}, WEIGHTS
    )
    with pytest.raises(ValueError, match=r"differ from this mix's in \['code'\]"):
        other.load_state_dict(mixed.state_dict())


def test_a_mix_gets_what_the_epoch_driver_gives_every_dataset(folder: Path) -> None:
    """Automatic epochs, prefetch in the main process (the same batches as without), a
    StatefulDataLoader's state with workers, and the loader's batch size given the public way."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make(**kwargs: Any) -> tt.MixedDataset:
        return tt.mix(_sources(folder), WEIGHTS, samples_per_epoch=30, **kwargs)

    def ids(items: Any) -> list[tuple[int, int]]:
        return [(int(s["_source"]), int(s["_record_id"])) for s in items]

    mixed = make()
    first, second = ids(mixed), ids(mixed)  # no set_epoch: each pass is the next epoch
    assert first != second and mixed.epoch == 1
    fresh = make()
    fresh.set_epoch(1)
    assert ids(fresh) == second
    assert ids(make(prefetch=0)) == ids(make(prefetch=3)) == first
    # Sample mode under workers, its batch size given to the dataset: whole loader batches per worker.
    loader = tt.loader(make(), batch_size=4, num_workers=2, collate_fn=list)  # (the sources' keys differ)
    batches = list(loader)
    assert len(batches) == len(loader) == 8 and [len(b) for b in batches] == [4] * 7 + [2]
    assert sorted(ids(s for b in batches for s in b)) == sorted(first)
    # A StatefulDataLoader with 2 workers stopped after 3 batches resumes in a fresh mix.
    stateful = StatefulDataLoader(
        make(batch_size=3), batch_size=None, num_workers=2, snapshot_every_n_steps=1
    )
    head = []
    for batch in stateful:
        head.append(batch)
        if len(head) == 3:
            state = stateful.state_dict()
            break
    again = StatefulDataLoader(make(batch_size=3), batch_size=None, num_workers=2, snapshot_every_n_steps=1)
    again.load_state_dict(state)
    rest = list(again)
    whole = list(DataLoader(make(batch_size=3), batch_size=None, num_workers=2))
    assert [_pairs(b, mixed.names) for b in head + rest] == [_pairs(b, mixed.names) for b in whole]
    with pytest.raises(ValueError, match="loader_batch_size=5.*batch_size=4"):
        list(DataLoader(make(loader_batch_size=5), batch_size=4, collate_fn=tt.collate))
