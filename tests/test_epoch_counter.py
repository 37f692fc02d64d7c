"""The epoch counter (torch_tfrecord.data.epoch.counter): counted per process, set_epoch wins, a loaded
state restarts the count at its epoch."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader, IterableDataset

from torch_tfrecord.data.epoch.counter import EpochCounter


class _Epochs(IterableDataset[int]):
    def __init__(self) -> None:
        self.counter = EpochCounter()

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield self.counter.begin()


def test_each_pass_is_the_next_epoch_in_workers_persistent_or_not() -> None:
    for persistent in (False, True):
        dataset = _Epochs()
        loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=persistent)
        assert [sorted(loader) for _ in range(3)] == [[0, 0], [1, 1], [2, 2]]  # both workers agree
        assert dataset.counter.current() == 2


def test_set_epoch_wins_and_a_loaded_state_restarts_the_count() -> None:
    counter = EpochCounter()
    assert [counter.begin(), counter.begin(), counter.current()] == [0, 1, 1]
    counter.restart_at(7)
    assert counter.current() == 7 and [counter.begin(), counter.begin()] == [7, 8]
    assert counter.begin(resuming=3) == 9  # this process is past epoch 3 already
    fresh = EpochCounter()
    assert fresh.begin(resuming=3) == 3 and fresh.begin() == 4  # a worker given its place
    counter.set(2)
    assert [counter.begin(), counter.begin(), counter.current()] == [2, 2, 2]
    counter.restart_at(5)
    assert counter.begin() == 5
    with pytest.raises(ValueError, match="epoch=-1 must be >= 0"):
        counter.set(-1)
