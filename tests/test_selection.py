from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data._utils.collate import default_convert

from torch_tfrecord import RowList
from torch_tfrecord.data.transport.fast_convert import convert


def test_a_mask_or_indices_select_rows() -> None:
    rows = RowList([b"a", b"b", b"c", b"d"])
    padding = torch.tensor([False, True, False, True])
    kept = rows[~padding]
    assert kept == [b"a", b"c"] and type(kept) is RowList
    assert rows[torch.tensor([3, -4])] == [b"d", b"a"]
    assert rows[np.array([True, False, False, False])] == [b"a"]
    assert rows[[2]] == [b"c"] and rows[[]] == []
    with pytest.raises(IndexError, match="selects from 4 rows"):
        rows[torch.tensor([True])]
    with pytest.raises(IndexError, match="row 4 out of range"):
        rows[torch.tensor([4])]


def test_everything_else_is_a_list() -> None:
    rows = RowList([b"a", b"b", b"c"])
    assert rows == [b"a", b"b", b"c"] and isinstance(rows, list) and repr(rows) == "[b'a', b'b', b'c']"
    assert rows[1] == b"b" and rows[-1] == b"c"
    assert rows[np.int64(0)] == b"a" and rows[torch.tensor(2)] == b"c"
    assert rows[1:] == [b"b", b"c"] and type(rows[1:]) is RowList
    back = pickle.loads(pickle.dumps(rows))
    assert back == rows and type(back) is RowList
    assert copy.copy(rows) == rows and type(copy.copy(rows)) is RowList
    # The loader's fast convert returns what torch's default_convert returns, type included.
    assert type(default_convert(rows)) is RowList and type(convert({"k": rows})["k"]) is RowList
    assert convert({"k": rows})["k"] == default_convert(rows) and convert({"k": rows})["k"] is not rows
