"""handoff: a batch's tensors become views of one block, values and structure unchanged."""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
import torch.multiprocessing  # registers the tensor reductions with ForkingPickler
from torch.utils.data import DataLoader, IterableDataset

import torch_tfrecord as tt
from torch_tfrecord.data.transport import handoff as _handoff
from torch_tfrecord.data.transport.handoff import InlineBatch, RingBatch, pack_tensors


def _sent(batch: Any) -> Any:
    """What the main process gets when a worker sends ``batch``."""
    return ForkingPickler.loads(ForkingPickler.dumps(batch))


def _example_batch() -> dict[str, Any]:
    ragged = tt.Ragged.from_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    return {
        "label": torch.arange(5),
        "half": torch.ones(3, 2, dtype=torch.float16),
        "flags": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "strided": torch.arange(12).reshape(3, 4).t(),
        "tokens": ragged,
        "names": [b"a", b"b"],
        "pair": (torch.tensor([7]), "text"),
        "images": [torch.full((3, 2, 2), 9, dtype=torch.uint8), torch.zeros(3, 1, 4, dtype=torch.uint8)],
        "same": ragged.offsets,  # one tensor twice
    }


def _check_same(packed: Any, batch: dict[str, Any]) -> None:
    assert packed.keys() == batch.keys()
    for key in ("label", "half", "flags", "scalar", "empty", "strided", "same"):
        assert packed[key].dtype == batch[key].dtype and torch.equal(packed[key], batch[key]), key
    assert isinstance(packed["tokens"], tt.Ragged) and packed["tokens"].tolist() == [[1.0, 2.0], [3.0]]
    assert packed["names"] == [b"a", b"b"] and packed["pair"][1] == "text"
    assert isinstance(packed["pair"], tuple) and torch.equal(packed["pair"][0], batch["pair"][0])
    assert all(torch.equal(a, b) for a, b in zip(packed["images"], batch["images"], strict=True))


@pytest.mark.parametrize("limit", [1 << 18, -1], ids=["inline", "shared-memory"])
def test_a_sent_batch_keeps_values_dtypes_shapes_and_structure(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    monkeypatch.setattr(_handoff, "INLINE_LIMIT", limit)
    batch = _example_batch()
    packed = pack_tensors(batch)
    assert type(packed) is RingBatch  # the ring carries the top-level tensors of both
    received = _sent(packed)
    assert type(received) is dict
    _check_same(received, batch)
    storages = {received[k].untyped_storage().data_ptr() for k in ("label", "half", "flags", "scalar")}
    storages.add(received["tokens"].values.untyped_storage().data_ptr())
    if limit < 0:
        assert len(storages) == 1  # one shared-memory block
    received["label"][0] = 100  # new memory, not the input's
    assert batch["label"][0] == 0
    assert received["label"].untyped_storage().is_shared() == (limit < 0)


def test_an_inline_batch_sends_what_it_holds_when_sent() -> None:
    packed = pack_tensors({"x": torch.ones(3), "y": torch.zeros(2)})
    packed["x"] = torch.full((2,), 5.0)  # e.g. a wrapper dataset changing it in the worker
    received = _sent(packed)
    assert received["x"].tolist() == [5.0, 5.0] and received["y"].tolist() == [0.0, 0.0]
    assert _sent(InlineBatch({"names": ["a"]})) == {"names": ["a"]}  # no tensor: a plain dict
    names = [b"x" * 10] * 300  # a bytes column is not walked value by value, in or out
    assert _handoff._map(names, lambda t: t, _handoff._keep) is names
    assert _sent(pack_tensors({"names": names, "x": torch.ones(2)}))["names"] == names


class _Batches(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        for i in range(3):
            yield pack_tensors({"x": torch.full((4,), float(i)), "tokens": _example_batch()["tokens"]})


def test_inline_batches_through_a_dataloader_worker() -> None:
    received = list(DataLoader(_Batches(), batch_size=None, num_workers=1))
    assert [type(batch) for batch in received] == [dict] * 3
    assert [batch["x"].tolist() for batch in received] == [[float(i)] * 4 for i in range(3)]
    assert all(batch["tokens"].tolist() == [[1.0, 2.0], [3.0]] for batch in received)


def test_pack_keeps_values_dtypes_shapes_and_structure() -> None:
    ragged = tt.Ragged.from_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    batch = {
        "label": torch.arange(5),
        "half": torch.ones(3, 2, dtype=torch.float16),
        "flags": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "tokens": ragged,
        "names": [b"a", b"b"],
        "pair": (torch.tensor([7]), "text"),
        "images": [torch.full((3, 2, 2), 9, dtype=torch.uint8), torch.zeros(3, 1, 4, dtype=torch.uint8)],
    }
    packed = _sent(pack_tensors(batch))
    assert packed.keys() == batch.keys()
    for key in ("label", "half", "flags", "scalar", "empty"):
        assert packed[key].dtype == batch[key].dtype and torch.equal(packed[key], batch[key]), key
    assert packed["tokens"].tolist() == [[1.0, 2.0], [3.0]]
    assert packed["names"] == [b"a", b"b"] and packed["pair"][1] == "text"
    assert all(torch.equal(a, b) for a, b in zip(packed["images"], batch["images"], strict=True))
    assert not any(packed[k].untyped_storage().is_shared() for k in ("label", "half", "flags", "scalar"))
    packed["label"][0] = 100  # new memory, not the input's
    assert batch["label"][0] == 0


def test_an_inline_batch_sends_what_numpy_cannot_hold_in_one_block() -> None:
    batch = {
        "brain": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        "conj": torch.tensor([1 + 2j, 3 - 1j]).conj(),  # a conjugate view: no NumPy array of it
        "label": torch.arange(4),
    }
    received = _sent(pack_tensors(batch))
    assert received["brain"].dtype == torch.bfloat16 and torch.equal(received["brain"], batch["brain"])
    assert torch.equal(received["conj"], batch["conj"].resolve_conj())
    assert torch.equal(received["label"], batch["label"])
    assert not received["label"].untyped_storage().is_shared()


def test_pack_leaves_a_single_tensor_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_handoff, "INLINE_LIMIT", -1)
    batch = (torch.ones(2), ["a"])
    assert pack_tensors(batch)[0] is batch[0]  # torch moves it to shared memory as it is sent


def test_a_large_dict_batch_leaves_in_one_shared_block_even_with_one_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_handoff, "INLINE_LIMIT", -1)
    batch = {"x": torch.ones(2), "names": [b"a"]}
    packed = pack_tensors(batch)
    assert type(packed) is RingBatch and packed["x"].is_shared() and not batch["x"].is_shared()
    received = _sent(packed)
    assert (
        received["x"].is_shared() and torch.equal(received["x"], batch["x"]) and received["names"] == [b"a"]
    )
