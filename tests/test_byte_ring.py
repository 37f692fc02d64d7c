"""byte_ring: a batch leaves a DataLoader worker through its shared-memory ring, not the pipe."""

from __future__ import annotations

import copy
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
from torch_tfrecord.data.transport import byte_ring
from torch_tfrecord.data.transport.byte_ring import SLOTS
from torch_tfrecord.data.transport.fast_convert import convert
from torch_tfrecord.data.transport.handoff import RingBatch, pack_tensors


def _column(seed: int, count: int = 64, size: int = 4096) -> RowList:
    rng = np.random.default_rng(seed)
    return RowList([rng.bytes(size + i % 7) for i in range(count)] + [b""])


def _every_field() -> dict[str, Any]:
    ragged = tt.Ragged.from_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    return {
        "data": _column(1),
        "label": torch.arange(65),
        "flags": torch.tensor([True, False, True]),
        "half": torch.ones(3, 2, dtype=torch.float16),
        "brain": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        "conj": torch.tensor([1 + 2j, 3 - 1j]).conj(),
        "strided": torch.arange(12).reshape(3, 4).t(),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "names": [b"a", b"bc"],
        "mixed": [b"a", "b"],  # not a bytes column: pickled
        "texts": RowList(["x", "yz"]),
        "tokens": ragged,
        "pair": (torch.tensor([7]), "text"),
        "count": 3,
    }


def test_a_batch_travels_in_the_ring_and_arrives_as_the_same_values_and_types() -> None:
    batch = _every_field()
    packed = pack_tensors(batch)
    assert type(packed) is RingBatch and convert(packed) is packed
    first = ForkingPickler.dumps(packed)  # the first message carries the segment
    received = pickle.loads(first)
    message = ForkingPickler.dumps(pack_tensors(batch))
    assert len(message) < 3_000  # the 260 KB column and the tensors are not in the message
    for got in (received, pickle.loads(message)):
        assert type(got) is dict and list(got) == list(batch)
        for key in ("label", "flags", "half", "brain", "scalar", "empty", "strided", "conj"):
            want = batch[key].resolve_conj()
            assert got[key].dtype == want.dtype and got[key].shape == want.shape, key
            assert torch.equal(got[key], want), key
            assert not got[key].untyped_storage().is_shared(), key
        assert type(got["data"]) is RowList and got["data"] == batch["data"]
        assert all(type(value) is bytes for value in got["data"])
        assert type(got["names"]) is list and got["names"] == [b"a", b"bc"]
        assert got["mixed"] == [b"a", "b"] and type(got["texts"]) is RowList and got["texts"] == ["x", "yz"]
        assert isinstance(got["tokens"], tt.Ragged) and got["tokens"].tolist() == [[1.0, 2.0], [3.0]]
        assert got["pair"][1] == "text" and torch.equal(got["pair"][0], torch.tensor([7]))
        assert got["count"] == 3
    received["label"][0] = 100  # its own memory: the next batch in that slot does not change it
    pickle.loads(ForkingPickler.dumps(pack_tensors({"label": torch.full((65,), 9)})))
    assert received["label"][1:].tolist() == list(range(1, 65)) and received["label"][0] == 100


def test_a_full_ring_sends_inline_and_every_batch_arrives_in_order() -> None:
    batches = [{"data": _column(seed), "label": torch.tensor([seed])} for seed in range(SLOTS + 2)]
    messages = [ForkingPickler.dumps(pack_tensors(batch)) for batch in batches]
    # Nothing was received yet: the first SLOTS took the slots, the rest went inline.
    assert [len(m) < 8_000 for m in messages] == [True] * SLOTS + [False] * 2
    for message, batch in zip(messages, batches, strict=True):
        got = pickle.loads(message)
        assert got["data"] == batch["data"] and torch.equal(got["label"], batch["label"])
    # Received, the slots are free again, and the ring is known: no segment in the message.
    again = ForkingPickler.dumps(pack_tensors(batches[0]))
    assert len(again) < 1_000 and pickle.loads(again)["data"] == batches[0]["data"]


def test_a_larger_batch_gets_a_larger_ring() -> None:
    small, large = _column(3, count=32), _column(4, count=64, size=64 * 1024)
    first = ForkingPickler.dumps(pack_tensors({"data": small}))
    second = ForkingPickler.dumps(pack_tensors({"data": large}))
    assert pickle.loads(first)["data"] == small and pickle.loads(second)["data"] == large
    assert byte_ring._ring is not None and byte_ring._ring.slot_size >= sum(map(len, large))
    assert len(byte_ring._received) >= 1


def test_a_batch_too_large_for_a_ring_goes_through_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_ring, "MAX_SLOT", 1 << 16)
    column = _column(5)
    message = ForkingPickler.dumps(pack_tensors({"data": column, "label": torch.arange(3)}))
    got = pickle.loads(message)
    assert len(message) > 200_000 and got["data"] == column and got["label"].tolist() == [0, 1, 2]


def test_a_column_that_is_not_all_bytes_is_pickled_beside_the_ring() -> None:
    column = [*_column(6), "text"]
    got = pickle.loads(ForkingPickler.dumps(pack_tensors({"data": column, "label": torch.arange(2)})))
    assert got["data"] == column and got["label"].tolist() == [0, 1]


def test_without_the_extension_the_ring_carries_the_same_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_ring, "compiled", None)
    batch = _every_field()
    for _ in range(2):
        got = pickle.loads(ForkingPickler.dumps(pack_tensors(batch)))
        assert got["data"] == batch["data"] and type(got["data"]) is RowList
        assert torch.equal(got["label"], batch["label"]) and got["names"] == [b"a", b"bc"]


class _Columns(IterableDataset):  # type: ignore[type-arg]
    def __init__(self, copies: bool = False) -> None:
        self.copies = copies

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        for i in range(info.id, 24, info.num_workers):
            batch = pack_tensors({"data": _column(i), "label": torch.tensor([i]), "x": torch.full((3,), i)})
            if self.copies:  # a wrapper pickling the batch in the worker must not take the segment
                batch = pack_tensors(copy.deepcopy(batch))
            yield batch


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("copies", [False, True], ids=["sent", "copied-in-the-worker"])
def test_batches_through_dataloader_workers_over_epochs(context: str, copies: bool) -> None:
    loader = DataLoader(
        _Columns(copies),
        batch_size=None,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=context,
    )
    for _ in range(2 if context == "spawn" else 3):
        received = list(loader)
        assert sorted(int(batch["label"]) for batch in received) == list(range(24))
        for batch in received:
            i = int(batch["label"])
            assert type(batch["data"]) is RowList and batch["data"] == _column(i)
            assert batch["x"].tolist() == [i] * 3


def test_a_dataset_of_4kb_records_through_workers_equals_the_main_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    payloads = [rng.bytes(4096 + i % 5) for i in range(600)]
    path = tmp_path / "kb.tfrecord"
    with tt.ExampleWriter(path, write_index=True) as writer:
        for i, payload in enumerate(payloads):
            writer.write({"data": payload, "label": i, "score": [float(i), -1.0]})
    spec = {
        "data": tt.FixedLen((), bytes),
        "label": tt.FixedLen((), torch.int64),
        "score": tt.FixedLen((2,), torch.float32),
    }
    ds = tt.TFRecordDataset(path, spec=spec, batch_size=64, seed=1, drop_last=False)
    main = list(DataLoader(ds, batch_size=None, num_workers=0))
    workers = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(workers) == len(main)
    for got, want in zip(
        sorted(workers, key=lambda b: int(b["label"][0])),
        sorted(main, key=lambda b: int(b["label"][0])),
        strict=True,
    ):
        assert list(got) == list(want) and type(got["data"]) is RowList and got["data"] == want["data"]
        for key in ("label", "score", "_padding", "_record_id"):
            assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
