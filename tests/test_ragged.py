from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_tfrecord import Ragged
from torch_tfrecord.errors import UnsupportedVersionError


@pytest.fixture
def ragged() -> Ragged:
    return Ragged(torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([0, 2, 2, 6]))


def test_rows_and_lengths(ragged: Ragged) -> None:
    assert len(ragged) == 3
    assert ragged.lengths.tolist() == [2, 0, 4]
    assert ragged[0].tolist() == [1, 2] and ragged[1].tolist() == [] and ragged[-1].tolist() == [3, 4, 5, 6]
    assert ragged.tolist() == [[1, 2], [], [3, 4, 5, 6]]
    assert [row.tolist() for row in ragged] == ragged.tolist()
    with pytest.raises(IndexError):
        ragged[3]


def test_slices(ragged: Ragged) -> None:
    assert ragged[1:].tolist() == [[], [3, 4, 5, 6]]
    assert ragged[1:].offsets.tolist() == [0, 0, 4]
    assert ragged[::2].tolist() == [[1, 2], [3, 4, 5, 6]]
    assert ragged[2:1].tolist() == []


def test_padding_and_nested(ragged: Ragged) -> None:
    assert ragged.to_padded(-1).tolist() == [[1, 2, -1, -1], [-1, -1, -1, -1], [3, 4, 5, 6]]
    assert ragged.to_padded(0, length=5).shape == (3, 5)
    with pytest.raises(ValueError, match="more than length=3"):
        ragged.to_padded(0, length=3)
    if not hasattr(torch.nested, "nested_tensor_from_jagged"):  # torch < 2.3
        with pytest.raises(UnsupportedVersionError, match=r"Ragged.to_nested needs torch >= 2\.3"):
            ragged.to_nested()
        return
    nested = ragged.to_nested()
    assert [t.tolist() for t in nested.unbind()] == ragged.tolist()


def test_inner_dimensions() -> None:
    ragged = Ragged.from_rows([torch.ones(2, 3), torch.zeros(1, 3)])
    assert ragged.values.shape == (3, 3)
    assert ragged.to_padded(7).shape == (2, 2, 3)
    assert ragged.to_padded(7)[1, 1].tolist() == [7, 7, 7]


def test_validation() -> None:
    with pytest.raises(ValueError, match="int64"):
        Ragged(torch.tensor([1]), torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="end at len"):
        Ragged(torch.tensor([1, 2]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="never decrease"):
        Ragged(torch.tensor([1, 2]), torch.tensor([0, 2, 1, 2]))
    assert len(Ragged.from_rows([], dtype=torch.int64)) == 0


def test_equality_and_to(ragged: Ragged) -> None:
    assert ragged == Ragged.from_rows(
        [torch.tensor([1, 2]), torch.tensor([], dtype=torch.int64), torch.tensor([3, 4, 5, 6])]
    )
    assert ragged != ragged.to(torch.float32)
    assert ragged.to(torch.float32).values.dtype == torch.float32


def test_repr_shows_the_shape_and_the_first_values_with_ellipses() -> None:
    small = Ragged.from_rows([torch.tensor([1, 2]), torch.tensor([], dtype=torch.int64), torch.arange(3, 11)])
    assert repr(small) == (
        "Ragged(rows=3, lengths=[2, 0, 8], dtype=torch.int64, values=[[1, 2], [], [3, 4, 5, 6, 7, 8, ...]])"
    )
    big = Ragged.from_rows([torch.full((n, 1000), 0.5) for n in range(100)])
    text = repr(big)
    assert text.startswith("Ragged(rows=100, lengths=0..99, total=4950, dtype=torch.float32, inner=(1000,), ")
    # Four rows shown, each inner list cut after six values, then an ellipsis for the rows left out.
    assert text.endswith("[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, ...]], ...])") and len(text) < 600
    assert repr(Ragged.from_rows([])) == "Ragged(rows=0, lengths=[], dtype=torch.float32, values=[])"


def test_a_mask_or_indices_select_rows(ragged: Ragged) -> None:
    mask = torch.tensor([True, False, True])
    assert ragged[mask].tolist() == [[1, 2], [3, 4, 5, 6]]
    assert ragged[~mask].tolist() == [[]] and ragged[~mask].values.dtype == ragged.values.dtype
    assert ragged[torch.tensor([2, 0, -1])].tolist() == [[3, 4, 5, 6], [1, 2], [3, 4, 5, 6]]
    assert ragged[[1, 0]].tolist() == [[], [1, 2]]
    assert ragged[np.array([False, False, True])].tolist() == [[3, 4, 5, 6]]
    assert ragged[torch.zeros(3, dtype=torch.bool)].tolist() == [] and ragged[[]].offsets.tolist() == [0]
    assert ragged[torch.tensor(2)].tolist() == [3, 4, 5, 6] and ragged[np.int64(0)].tolist() == [1, 2]
    with pytest.raises(IndexError, match=r"mask of shape \(2,\) selects from 3 rows"):
        ragged[torch.tensor([True, False])]
    with pytest.raises(IndexError, match="row 3 out of range for 3 rows"):
        ragged[torch.tensor([0, 3])]
    with pytest.raises(TypeError, match="boolean mask or integer indices"):
        ragged[torch.tensor([0.0])]


def test_selected_rows_keep_their_inner_dimensions() -> None:
    rows = [torch.arange(n * 2, dtype=torch.float32).reshape(n, 2) + n for n in (3, 0, 1, 2)]
    ragged = Ragged.from_rows(rows)
    picked = ragged[torch.tensor([3, 0])]
    assert picked == Ragged.from_rows([rows[3], rows[0]])
    assert picked.values.shape == (5, 2)
