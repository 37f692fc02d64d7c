"""tt.bucket over seqio-layout shards: every sequence in exactly one batch on one rank, batches of one
bucket each padded as tf.data pads them, equal batches per rank with a true len(), the same with
any number of workers, resume (also on another world size), transforms."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lm_data import KEYS, SPEC, tokens, write_lm
from torch.utils.data import DataLoader

import torch_tfrecord as tt

RNG = np.random.default_rng(7)
LENGTHS = np.clip(np.round(RNG.lognormal(np.log(20), 0.8, (230, 2))), 0, 300).astype(np.int64)
BOUNDARIES = [8, 16, 32, 64]
SIZES = [16, 8, 6, 4, 2]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_lm(tmp_path_factory.mktemp("buckets"), LENGTHS)


def buckets(paths: list[str], rank: int = 0, world_size: int = 1, **kwargs: Any) -> tt.BucketedDataset:
    source = tt.TFRecordDataset(
        paths, spec=SPEC, seed=kwargs.pop("seed", 4), transform=kwargs.pop("transform", None)
    )
    return tt.bucket(source, BOUNDARIES, SIZES, KEYS, rank=rank, world_size=world_size, **kwargs)


def check_batch(batch: dict[str, Any], pad_to_boundary: bool = False) -> list[tuple[int, bool]]:
    """(record, padding) of each row, the batch checked: its rows' tokens, lengths and padding,
    one bucket, the right batch size (or fewer: a bucket's last), the right width."""
    records = batch["_record_id"].tolist()
    longest = [max(int(LENGTHS[r, 0]), int(LENGTHS[r, 1])) for r in records]
    bucket = {sum(length >= b for b in BOUNDARIES) for length in longest}
    assert len(bucket) == 1, longest
    number = bucket.pop()
    assert len(records) <= SIZES[number]
    for k, key in enumerate(KEYS):
        dense = batch[key]
        lengths = batch["_lengths"][key].tolist()
        assert lengths == [int(LENGTHS[r, k]) for r in records]
        width = max(lengths) if not pad_to_boundary or number == len(BOUNDARIES) else BOUNDARIES[number] - 1
        assert dense.shape == (len(records), width) and dense.dtype == torch.int64
        for row, (record, length) in enumerate(zip(records, lengths, strict=True)):
            assert dense[row, :length].tolist() == tokens(record, key, length)
            assert (dense[row, length:] == 0).all()
    return list(zip(records, batch["_padding"].tolist(), strict=True))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    world_size=st.integers(1, 3), workers=st.sampled_from([0, 2]), drop_last=st.booleans(), pad=st.booleans()
)
def test_every_sequence_in_one_batch_on_one_rank(
    paths: list[str], world_size: int, workers: int, drop_last: bool, pad: bool
) -> None:
    seen: collections.Counter[int] = collections.Counter()
    steps = []
    for rank in range(world_size):
        dataset = buckets(paths, rank, world_size, drop_last=drop_last, pad_to_bucket_boundary=pad)
        loader = DataLoader(dataset, batch_size=None, num_workers=workers)
        batches = list(loader)
        steps.append((len(batches), len(loader)))
        for batch in batches:
            seen.update(record for record, padding in check_batch(batch, pad) if not padding)
        stats = dataset.bucket_stats()
    assert len(set(steps)) == 1 and steps[0][0] == steps[0][1]
    assert max(seen.values()) == 1
    if drop_last:
        assert len(LENGTHS) - len(seen) == stats.dropped_sequences
    else:
        assert sorted(seen) == list(range(len(LENGTHS)))
    assert stats.sequences == len(LENGTHS) and sum(s for _, s in stats.per_bucket) == len(LENGTHS)


def test_the_same_batches_with_any_workers_and_new_ones_each_epoch(paths: list[str]) -> None:
    def records(workers: int, epoch: int) -> list[list[int]]:
        dataset = buckets(paths)
        dataset.set_epoch(epoch)
        return [b["_record_id"].tolist() for b in DataLoader(dataset, batch_size=None, num_workers=workers)]

    assert records(0, 0) == records(2, 0) == records(1, 0)
    assert records(0, 1) != records(0, 0)


def test_resume_on_another_world_size(paths: list[str]) -> None:
    whole = [r for rank in range(2) for b in buckets(paths, rank, 2) for r, pad in check_batch(b) if not pad]
    states, before = [], []
    for rank in range(2):
        dataset = buckets(paths, rank, 2)
        iterator = iter(dataset)
        for _ in range(5):
            before += [r for r, pad in check_batch(next(iterator)) if not pad]
        states.append(dataset.state_dict())
    rest = []
    for rank in range(3):
        resumed = buckets(paths, rank, 3)
        resumed.load_state_dict(states)
        rest += [r for b in resumed for r, pad in check_batch(b) if not pad]
    assert sorted(before + rest) == sorted(whole) == list(range(len(LENGTHS)))


def test_a_transform_runs_per_sequence_and_other_features_are_batched(tmp_path: Path) -> None:
    path = tmp_path / "labelled.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for record in range(40):
            writer.write({"inputs": tokens(record, "inputs", record % 20), "label": record})

    def scaled(sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "inputs": sample["inputs"] * 2}

    source = tt.TFRecordDataset(
        str(path), spec={"inputs": "int", "label": tt.FixedLen((), torch.int64)}, transform=scaled
    )
    seen = []
    for batch in tt.bucket(source, [10], [4, 3], ["inputs"]):
        labels = batch["label"]
        assert labels.tolist() == batch["_record_id"].tolist()
        for row, record in enumerate(labels.tolist()):
            length = record % 20
            assert batch["inputs"][row, :length].tolist() == [2 * t for t in tokens(record, "inputs", length)]
        seen += labels.tolist()
    assert sorted(seen) == list(range(40))


def test_bad_options_are_refused(paths: list[str]) -> None:
    with pytest.raises(ValueError, match="one per bucket"):
        tt.bucket(tt.TFRecordDataset(paths, spec=SPEC), [8, 16], [4, 4])
    with pytest.raises(ValueError, match="pad_id"):
        buckets(paths, pad_id=0.5)
