from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import torch_tfrecord as tt


def test_collate_mixed_sample() -> None:
    samples = [
        {
            "label": torch.tensor(1),
            "ids": torch.tensor([1, 2]),
            "name": b"a",
            "img": torch.zeros(3, 2, 2),
            "n": 1,
        },
        {
            "label": torch.tensor(2),
            "ids": torch.tensor([3]),
            "name": b"b",
            "img": torch.zeros(3, 4, 4),
            "n": 2,
        },
    ]
    batch = tt.collate(samples)
    assert batch["label"].tolist() == [1, 2]
    assert isinstance(batch["ids"], tt.Ragged) and batch["ids"].tolist() == [[1, 2], [3]]
    assert batch["name"] == [b"a", b"b"]
    assert isinstance(batch["img"], list) and [i.shape for i in batch["img"]] == [(3, 2, 2), (3, 4, 4)]
    assert batch["n"].tolist() == [1, 2]


def test_collate_errors() -> None:
    with pytest.raises(ValueError, match="different keys"):
        tt.collate([{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match="at least one"):
        tt.collate([])


def test_with_dataloader_over_decoded_examples() -> None:
    records = [tt.encode_example({"ids": list(range(n)), "label": n}) for n in range(5)]
    spec = {"ids": "int", "label": tt.FixedLen((), torch.int64)}
    samples = [tt.decode_example(r, spec) for r in records]
    loader = DataLoader(samples, batch_size=3, collate_fn=tt.collate)
    batches = list(loader)
    assert batches[0]["ids"].tolist() == [[], [0], [0, 1]]
    assert batches[1]["label"].tolist() == [3, 4]
