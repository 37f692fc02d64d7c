from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_tfrecord as tt


def test_python_values_map_to_list_types() -> None:
    record = tt.encode_example(
        {
            "i": 3,
            "b": True,
            "f": 0.5,
            "s": "héllo",
            "y": b"\x00",
            "li": [1, 2],
            "lf": [1, 2.5],
            "ls": ["a", b"b"],
        }
    )
    out = tt.decode_example(record)
    assert out["i"].tolist() == [3] and out["b"].tolist() == [1] and out["f"].tolist() == [0.5]
    assert out["s"] == ["héllo".encode()] and out["y"] == [b"\x00"]
    assert (
        out["li"].dtype == torch.int64
        and out["lf"].dtype == torch.float32
        and out["lf"].tolist() == [1.0, 2.5]
    )
    assert out["ls"] == [b"a", b"b"]


def test_arrays_and_tensors() -> None:
    record = tt.encode_example(
        {
            "np_i": np.array([[1, 2], [3, 4]], dtype=np.int32),
            "np_f": np.array([0.25, 0.5], dtype=np.float64),
            "t_f": torch.tensor([1.5], dtype=torch.bfloat16),
            "t_b": torch.tensor([True, False]),
            "np_s": np.array(["a", "bc"]),
            "wrapped": tt.Int64List(torch.tensor([255, 0], dtype=torch.uint8)),
        }
    )
    out = tt.decode_example(record)
    assert out["np_i"].tolist() == [1, 2, 3, 4]
    assert out["np_f"].tolist() == [0.25, 0.5]
    assert out["t_f"].tolist() == [1.5]
    assert out["t_b"].tolist() == [1, 0]
    assert out["np_s"] == [b"a", b"bc"]
    assert out["wrapped"].tolist() == [255, 0]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (torch.zeros(3, 4, 4, dtype=torch.uint8), "uint8 tensor is ambiguous"),
        (np.zeros(4, dtype=np.uint8), "uint8 array is ambiguous"),
        ([1, b"x"], "mixes text/bytes with numbers"),
        (None, "cannot encode NoneType"),
        ([2**63], "exceeds int64"),
        (tt.Int64List([2**63]), "does not fit int64"),
        (np.array([2**64 - 1], dtype=np.uint64), "exceeds int64"),
        ({"a": 1}, "cannot encode dict"),
    ],
)
def test_ambiguous_or_bad_values_are_refused_with_key(value: object, words: str) -> None:
    with pytest.raises((TypeError, ValueError), match=f"feature 'k'.*{words}|{words}"):
        tt.encode_example({"k": value})


def test_encoding_is_deterministic() -> None:
    a = tt.encode_example({"b": 1, "a": [1.0], "c": b"x"})
    b = tt.encode_example({"c": b"x", "a": [1.0], "b": 1})
    assert a == b


def test_sequence_example_from_arrays() -> None:
    record = tt.encode_sequence_example(
        {"n": 2}, {"frames": torch.arange(6.0).reshape(2, 3), "tags": ["x", "y"]}
    )
    context, sequences = tt.decode_sequence_example(
        record,
        {"n": tt.FixedLen((), torch.int64)},
        {"frames": tt.FixedLenSequence((3,), torch.float32), "tags": tt.FixedLenSequence((), str)},
    )
    assert context["n"].item() == 2
    assert sequences["frames"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert sequences["tags"] == ["x", "y"]


def test_writers_accept_dicts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with tt.ExampleWriter(tmp_path / "a.tfrecord") as writer:
        writer.write({"label": 1})
        writer.write(tt.encode_example({"label": 2}))
    with tt.ShardedExampleWriter(tmp_path / "s", max_records=1) as sharded:
        sharded.write({"label": 3})
        sharded.write({"label": 4})
    records = list(tt.read_records(tmp_path / "a.tfrecord")) + [
        r for p in sharded.shard_paths for r in tt.read_records(p)
    ]
    labels = tt.decode_batch(records, {"label": tt.FixedLen((), torch.int64)})["label"]
    assert labels.tolist() == [1, 2, 3, 4]
    with pytest.raises(TypeError, match="bytes or a dict"):
        tt.ExampleWriter(tmp_path / "b.tfrecord").write(3)  # type: ignore[arg-type]
