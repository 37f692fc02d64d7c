"""_packing: a batch's tensors become views of one block, values and structure unchanged."""

from __future__ import annotations

import torch

import torch_tfrecord as tt
from torch_tfrecord._packing import pack_tensors


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
    packed = pack_tensors(batch)
    assert packed.keys() == batch.keys()
    for key in ("label", "half", "flags", "scalar", "empty"):
        assert packed[key].dtype == batch[key].dtype and torch.equal(packed[key], batch[key]), key
    assert packed["tokens"].tolist() == [[1.0, 2.0], [3.0]]
    assert packed["names"] == [b"a", b"b"] and packed["pair"][1] == "text"
    assert all(torch.equal(a, b) for a, b in zip(packed["images"], batch["images"], strict=True))
    storages = {packed[k].untyped_storage().data_ptr() for k in ("label", "half", "flags", "scalar")}
    storages.add(packed["tokens"].values.untyped_storage().data_ptr())
    assert len(storages) == 1  # one block
    packed["label"][0] = 100  # views of a new block, not of the input
    assert batch["label"][0] == 0


def test_pack_leaves_a_single_tensor_alone() -> None:
    batch = {"x": torch.ones(2), "names": ["a"]}
    assert pack_tensors(batch)["x"] is batch["x"]
