"""The dataset's view of its DataLoader (torch_tfrecord/_loader.py): the faster default_convert."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_convert

import torch_tfrecord as tt
from torch_tfrecord.data.transport.fast_convert import convert

Point = collections.namedtuple("Point", ["x", "y"])


class Bag(dict):  # type: ignore[type-arg]
    """A dict subclass: both converts must copy it as its own type."""


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b


_plain = st.one_of(st.binary(max_size=8), st.text(max_size=4), st.integers(), st.booleans(), st.none())
_leaf = st.one_of(
    _plain,
    st.floats(allow_nan=False),
    st.lists(st.integers(-5, 5), max_size=3).map(np.array),
    st.integers(-5, 5).map(np.int64),
    st.lists(st.floats(-1, 1), max_size=3).map(torch.tensor),
)
_data = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(_plain, max_size=6),
        st.tuples(inner, inner),
        st.builds(Point, inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=4).map(Bag),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_data)
def test_convert_returns_what_default_convert_returns(data: Any) -> None:
    _same(convert(data), default_convert(data))


def test_a_batch_of_bytes_columns_is_copied_not_shared() -> None:
    batch = {"data": [b"a", b"bc"], "label": torch.tensor([1, 2]), "n": np.arange(2)}
    converted = convert(batch)
    assert converted is not batch and converted["data"] is not batch["data"]
    assert converted["data"] == [b"a", b"bc"] and converted["label"] is batch["label"]
    assert isinstance(converted["n"], torch.Tensor)  # numpy arrays still become tensors


def _bytes_shards(tmp_path: Path) -> list[str]:
    with tt.ShardedExampleWriter(str(tmp_path / "b"), max_records=25) as writer:
        for i in range(50):
            writer.write({"data": bytes([i]) * (i + 1), "label": i})
    return writer.shard_paths


SPEC = {"data": tt.FixedLen((), bytes), "label": tt.FixedLen((), torch.int64)}


@pytest.mark.parametrize("workers", [0, 1])
def test_a_loader_without_batch_size_converts_batches_with_the_fast_convert(
    tmp_path: Path, workers: int
) -> None:
    ds = tt.TFRecordDataset(_bytes_shards(tmp_path), spec=SPEC, batch_size=8, shuffle=False, drop_last=False)
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    batches = list(loader)
    assert [len(batch["data"]) for batch in batches] == [8] * 7  # the last one padded
    records = [
        value
        for batch in batches
        for value, padding in zip(batch["data"], batch["_padding"].tolist(), strict=True)
        if not padding
    ]
    assert records == [bytes([i]) * (i + 1) for i in range(50)]
    # A list of bytes, that also drops padding as a tensor does: batch["data"][~batch["_padding"]].
    assert all(type(batch["data"]) is tt.RowList for batch in batches)
    assert [v for batch in batches for v in batch["data"][~batch["_padding"]]] == records
    if workers == 0:
        fetcher = loader._get_iterator()._dataset_fetcher  # type: ignore[attr-defined]
        assert fetcher.collate_fn is convert


def test_a_users_collate_fn_is_left_alone(tmp_path: Path) -> None:
    seen: list[Any] = []

    def mine(batch: Any) -> Any:
        seen.append(batch)
        return batch

    ds = tt.TFRecordDataset(_bytes_shards(tmp_path), spec=SPEC, batch_size=10, shuffle=False)
    loader = DataLoader(ds, batch_size=None, collate_fn=mine)
    assert len(list(loader)) == 5 and len(seen) == 5
    assert loader._get_iterator()._dataset_fetcher.collate_fn is mine  # type: ignore[attr-defined]


def test_what_a_transform_returns_is_converted_as_default_convert_does(tmp_path: Path) -> None:
    def transform(batch: dict[str, Any]) -> Any:
        return np.asarray(batch["label"]), batch["data"]

    ds = tt.TFRecordDataset(
        _bytes_shards(tmp_path), spec=SPEC, batch_size=25, shuffle=False, transform=transform
    )
    batches = list(DataLoader(ds, batch_size=None))
    assert [type(batch) for batch in batches] == [list, list]  # default_convert makes tuples lists
    assert torch.equal(batches[1][0], torch.arange(25, 50))
    assert batches[1][1] == [bytes([i]) * (i + 1) for i in range(25, 50)]
