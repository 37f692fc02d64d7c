"""byte_ring: bytes columns leave a DataLoader worker through its shared-memory ring, not the pipe."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing  # registers the tensor reductions with ForkingPickler
from torch.utils.data import DataLoader, IterableDataset

import torch_tfrecord as tt
from torch_tfrecord.codec.selection import RowList
from torch_tfrecord.data import byte_ring
from torch_tfrecord.data.byte_ring import SLOTS, RingBytes, byte_columns
from torch_tfrecord.data.packing import pack_tensors


def _column(seed: int, count: int = 64, size: int = 4096) -> RowList:
    rng = np.random.default_rng(seed)
    return RowList([rng.bytes(size + i % 7) for i in range(count)] + [b""])


def test_a_large_column_travels_in_the_ring_and_arrives_as_the_same_type_and_values() -> None:
    column = _column(1)
    packed = pack_tensors({"data": column, "label": torch.arange(65), "small": [b"x"]})
    assert type(packed["data"]) is RingBytes and packed["data"] == column  # in the worker: the same list
    assert type(packed["small"]) is list  # a small column stays in the message
    message = ForkingPickler.dumps(packed)
    assert len(message) < 8_000  # the 260 KB of values are not in the message
    received = pickle.loads(message)
    assert type(received["data"]) is RowList and received["data"] == column
    assert all(type(value) is bytes for value in received["data"])
    plain = pickle.loads(ForkingPickler.dumps(pack_tensors({"data": list(column)})))
    assert type(plain["data"]) is list and plain["data"] == column
    few = pack_tensors({"data": RowList([b"ab"] * 10)})  # under MIN_BYTES: in the message
    assert type(few["data"]) is RowList


def test_a_full_ring_sends_inline_and_every_column_arrives_in_order() -> None:
    columns = [_column(seed) for seed in range(SLOTS + 2)]
    messages = [ForkingPickler.dumps(byte_columns({"data": column})) for column in columns]
    # Nothing was received yet: the first SLOTS took the slots, the rest went inline.
    assert [len(m) < 8_000 for m in messages] == [True] * SLOTS + [False] * 2
    assert [pickle.loads(m)["data"] for m in messages] == columns
    # Received, the slots are free again, and the ring is known: no segment in the message.
    again = ForkingPickler.dumps(byte_columns({"data": columns[0]}))
    assert len(again) < 4_000 and pickle.loads(again)["data"] == columns[0]


def test_a_larger_column_gets_a_larger_ring() -> None:
    small, large = _column(3, count=32), _column(4, count=64, size=64 * 1024)
    first = ForkingPickler.dumps(byte_columns({"data": small}))
    second = ForkingPickler.dumps(byte_columns({"data": large}))
    assert pickle.loads(first)["data"] == small and pickle.loads(second)["data"] == large
    assert byte_ring._ring is not None and byte_ring._ring.slot_size >= sum(map(len, large))
    assert len(byte_ring._received) >= 1


def test_a_column_too_large_for_a_ring_goes_through_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_ring, "MAX_SLOT", 1 << 16)
    column = _column(5)
    message = ForkingPickler.dumps(byte_columns({"data": column}))
    assert len(message) > 200_000 and pickle.loads(message)["data"] == column


class _Columns(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        for i in range(info.id, 24, info.num_workers):
            yield pack_tensors({"data": _column(i), "label": torch.tensor([i])})


def test_columns_through_dataloader_workers_over_epochs() -> None:
    loader = DataLoader(_Columns(), batch_size=None, num_workers=2, persistent_workers=True)
    for _ in range(3):
        received = list(loader)
        assert sorted(int(batch["label"]) for batch in received) == list(range(24))
        for batch in received:
            assert type(batch["data"]) is RowList and batch["data"] == _column(int(batch["label"]))


def test_a_dataset_of_4kb_records_through_workers_equals_the_main_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    payloads = [rng.bytes(4096 + i % 5) for i in range(600)]
    path = tmp_path / "kb.tfrecord"
    with tt.ExampleWriter(path, write_index=True) as writer:
        for i, payload in enumerate(payloads):
            writer.write({"data": payload, "label": i})
    spec = {"data": tt.FixedLen((), bytes), "label": tt.FixedLen((), torch.int64)}
    ds = tt.TFRecordDataset(path, spec=spec, batch_size=64, seed=1, drop_last=False)
    main = list(DataLoader(ds, batch_size=None, num_workers=0))
    workers = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(i for b in workers for i in b["label"].tolist()) == sorted(
        i for b in main for i in b["label"].tolist()
    )
    for batch in workers:
        assert type(batch["data"]) is RowList
        assert batch["data"] == [payloads[i] for i in batch["label"].tolist()]
