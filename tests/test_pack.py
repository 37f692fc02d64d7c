"""tt.pack over real seqio-layout shards (int64 inputs / targets written here): every token of every
sequence exactly once across ranks and workers, rows exactly ``length``, segment ids and positions
consistent, equal rows per rank with a true len(), resume mid-epoch (also on another world size),
transforms, mixes, SequenceExamples, and the errors of bad input."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lm_data import KEYS, SPEC, all_tokens, row_pieces, token_counts, tokens, write_lm
from torch.utils.data import DataLoader

import torch_tfrecord as tt

# Three length distributions, each in its own shards: short, C4-like (log-normal, some longer
# than a row), and mostly empty.
RNG = np.random.default_rng(48)
DISTRIBUTIONS = {
    "short": np.stack([RNG.integers(0, 20, 140), RNG.integers(1, 30, 140)], axis=1),
    "lognormal": np.clip(np.round(RNG.lognormal(np.log(20), 1.0, (170, 2))), 0, 480).astype(np.int64),
    "sparse": RNG.integers(0, 40, (120, 2)) * (RNG.random((120, 2)) < 0.3),
}
LENGTH = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("lm")
    return {name: write_lm(folder / name, lengths) for name, lengths in DISTRIBUTIONS.items()}


def source(paths: list[str], **kwargs: Any) -> tt.TFRecordDataset:
    return tt.TFRecordDataset(paths, spec=SPEC, **{"seed": 11, **kwargs})


def epoch_rows(dataset: tt.PackedDataset, workers: int, loader_batch: int = 4) -> tuple[list[Any], int]:
    """The rows of one epoch through a DataLoader (batch mode: the dataset's batches; sample mode:
    the loader's), as row pieces, and len(loader)."""
    if dataset.plan.batch_size is None:
        loader = tt.loader(dataset, batch_size=loader_batch, num_workers=workers)
    else:
        loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    rows = [row for batch in loader for row in row_pieces(batch)]
    return rows, len(loader)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(sorted(DISTRIBUTIONS)),
    method=st.sampled_from(["first_fit", "best_fit", "concat"]),
    world_size=st.integers(1, 3),
    workers=st.sampled_from([0, 0, 2]),
    batch_size=st.sampled_from([None, 1, 3]),
    buffer_size=st.integers(1, 16),
    drop_last=st.booleans(),
)
def test_every_token_once_across_ranks_and_workers_in_rows_of_exactly_length(
    shards: dict[str, list[str]],
    name: str,
    method: str,
    world_size: int,
    workers: int,
    batch_size: int | None,
    buffer_size: int,
    drop_last: bool,
) -> None:
    lengths = DISTRIBUTIONS[name]
    seen: collections.Counter[tuple[int, str, int]] = collections.Counter()
    counts = []
    for rank in range(world_size):
        dataset = tt.pack(
            source(shards[name]), LENGTH, KEYS, method, buffer_size=buffer_size, split_long=True,  # type: ignore[arg-type]
            batch_size=batch_size, drop_last=drop_last, rank=rank, world_size=world_size,
        )  # fmt: skip
        rows, steps = epoch_rows(dataset, workers)
        counts.append((len(rows), steps, len(dataset)))
        seen += token_counts(rows)
        stats = dataset.pack_stats()
    assert len({count[:2] for count in counts}) == 1, counts  # the same rows and steps on every rank
    assert all(
        steps == -(-rows // (batch_size or 4)) if batch_size is None else steps == length
        for rows, steps, length in counts
    )
    assert max(seen.values(), default=1) == 1  # no token twice
    expected = all_tokens(lengths)
    if drop_last:  # only the sequences of the rows left out are missing
        missing = {record for record, _, _ in expected - seen}
        assert len(missing) <= stats.dropped_sequences
        assert stats.dropped_rows < world_size * (batch_size or 1)
    else:
        assert seen == expected
        assert counts[0][0] * world_size == stats.rows + stats.padding_rows
    assert stats.sequences == len(lengths) and stats.empty == int((lengths.sum(axis=1) == 0).sum())
    assert stats.tokens == {key: int(lengths[:, k].sum()) for k, key in enumerate(KEYS)}


def test_the_rows_are_the_same_with_any_workers_and_a_new_packing_each_epoch(
    shards: dict[str, list[str]],
) -> None:
    dataset = tt.pack(source(shards["lognormal"]), LENGTH, split_long=True, batch_size=2)
    first = []
    for workers in (0, 1, 2):
        dataset.set_epoch(0)
        first.append(epoch_rows(dataset, workers)[0])
    assert first[0] == first[1] == first[2]
    fresh = tt.pack(source(shards["lognormal"]), LENGTH, split_long=True, batch_size=2)
    assert epoch_rows(fresh, 2)[0] == first[0]
    assert epoch_rows(fresh, 2)[0] != first[0]  # the next pass is epoch 1: another order, another packing
    assert fresh.epoch == 1


def test_rows_hold_what_seqio_packs_in_its_layout(tmp_path: Path) -> None:
    lengths = np.array([[3, 2], [0, 4], [5, 1], [2, 2]])
    paths = write_lm(tmp_path, lengths, shards=1)
    dataset = tt.pack(
        tt.TFRecordDataset(paths, spec=SPEC, shuffle=False), {"inputs": 8, "targets": 6}, buffer_size=1
    )
    rows = list(dataset)
    assert [row["inputs"].shape for row in rows] == [torch.Size([8])] * 2
    assert [row["targets"].shape for row in rows] == [torch.Size([6])] * 2
    first = rows[0]
    assert first["inputs"].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]  # record 0 (record 1 has no inputs)
    assert first["inputs_segment_ids"].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert first["targets"].tolist() == [500, 501, *tokens(1, "targets", 4)]
    assert first["targets_segment_ids"].tolist() == [1, 1, 2, 2, 2, 2]
    assert first["targets_positions"].tolist() == [0, 1, 0, 1, 2, 3]
    assert first["inputs"].dtype == torch.int64 and first["targets_segment_ids"].dtype == torch.int32
    second = rows[1]  # records 2 and 3 (a window of one row: next-fit)
    assert second["inputs"].tolist() == [*tokens(2, "inputs", 5), 3000, 3001, 0]
    assert second["inputs_segment_ids"].tolist() == [1, 1, 1, 1, 1, 2, 2, 0]
    assert second["inputs_positions"].tolist() == [0, 1, 2, 3, 4, 0, 1, 0]
    assert second["targets"].tolist() == [2500, 3500, 3501, 0, 0, 0]
    assert [bool(row["_padding"]) for row in rows] == [False, False]
    assert dataset.pack_stats().fill == {"inputs": 10 / 16, "targets": 9 / 12}


@pytest.mark.parametrize("method", ["first_fit", "concat"])
def test_resume_mid_epoch_on_the_same_and_on_another_world_size(
    shards: dict[str, list[str]], method: str
) -> None:
    def make(rank: int, world_size: int) -> tt.PackedDataset:
        return tt.pack(source(shards["lognormal"]), LENGTH, KEYS, method, split_long=True, batch_size=2,  # type: ignore[arg-type]
                       rank=rank, world_size=world_size)  # fmt: skip

    whole = [row for rank in range(2) for batch in _epoch(make(rank, 2), 1) for row in row_pieces(batch)]
    states, before = [], []
    for rank in range(2):
        dataset = make(rank, 2)
        list(dataset)  # epoch 0
        iterator = iter(dataset)
        for _ in range(3):
            before += row_pieces(next(iterator))
        states.append(dataset.state_dict())
    # The same world: each rank goes on where it stopped.
    same = []
    for rank in range(2):
        resumed = make(rank, 2)
        resumed.load_state_dict(states[rank])
        same += [row for batch in resumed for row in row_pieces(batch)]
    assert token_counts(before + same) == token_counts(whole)
    # Three ranks take the rest of the epoch from the states of both: nothing lost, nothing twice.
    rest = []
    lengths = []
    for rank in range(3):
        resumed = make(rank, 3)
        resumed.load_state_dict(states)
        lengths.append(len(resumed))
        batches = list(resumed)
        assert len(batches) == lengths[-1]
        rest += [row for batch in batches for row in row_pieces(batch)]
    assert len(set(lengths)) == 1
    assert token_counts(before + rest) == token_counts(whole)
    assert make(0, 3).epoch == 0 and resumed.epoch == 1


def _epoch(dataset: tt.PackedDataset, epoch: int) -> list[dict[str, Any]]:
    dataset.set_epoch(epoch)
    return list(dataset)


def test_a_stateful_loader_with_workers_resumes_in_sample_mode(shards: dict[str, list[str]]) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> Any:
        dataset = tt.pack(source(shards["short"]), LENGTH, buffer_size=4)
        return StatefulDataLoader(
            dataset, batch_size=3, num_workers=2, collate_fn=tt.collate, snapshot_every_n_steps=1
        )

    full = [row for batch in loader() for row in row_pieces(batch)]
    first = loader()
    head = []
    for batch in first:
        head += row_pieces(batch)
        if len(head) >= 9:
            break
    again = loader()
    again.load_state_dict(first.state_dict())
    assert head + [row for batch in again for row in row_pieces(batch)] == full


def test_a_transform_runs_on_each_sequence_and_may_not_change_its_length(
    shards: dict[str, list[str]],
) -> None:
    def shift(sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "targets": sample["targets"] + 7}

    plain = tt.pack(source(shards["short"]), LENGTH, batch_size=4)
    shifted = tt.pack(source(shards["short"], transform=shift), LENGTH, batch_size=4)
    for a, b in zip(plain, shifted, strict=True):
        assert torch.equal(
            b["targets"], torch.where(a["targets_segment_ids"] > 0, a["targets"] + 7, a["targets"])
        )
        assert torch.equal(a["inputs"], b["inputs"])

    def grow(sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "targets": torch.cat([sample["targets"], sample["targets"][:1]])}

    with pytest.raises(
        tt.FeatureShapeError, match=r"key 'targets' of record \d+ of '.*lm-0000\d-of-00003.tfrecord' has"
    ):
        list(tt.pack(source(shards["short"], transform=grow), LENGTH, batch_size=4))


def test_a_mix_is_packed_each_place_once(shards: dict[str, list[str]]) -> None:
    def mixed(rank: int) -> tt.MixedDataset:
        sources = {"short": source(shards["short"]), "sparse": source(shards["sparse"], seed=3)}
        return tt.mix(sources, {"short": 2, "sparse": 1}, samples_per_epoch=150, rank=rank, world_size=2)

    seen: collections.Counter[tuple[int, str, int]] = collections.Counter()
    for rank in range(2):
        packed = tt.pack(mixed(rank), LENGTH, split_long=True, batch_size=2)
        assert packed.plan.world_size == 2 and packed.plan.rank == rank  # the mix's world
        seen += token_counts(row for batch in packed for row in row_pieces(batch))
    mix = mixed(0)
    expected: collections.Counter[tuple[int, str, int]] = collections.Counter()
    for number, (one, count) in enumerate(zip(mix.sources, mix.counts, strict=True)):
        lengths = DISTRIBUTIONS[mix.names[number]]
        expected += all_tokens(lengths, one.plan.stream(np.arange(count)).tolist())
    # Records of both sources share their ids here: count tokens, each as often as the places hold it.
    assert seen == expected


def test_sequence_examples_feature_lists_are_packed(tmp_path: Path) -> None:
    path = tmp_path / "seq.tfrecord"
    with tt.ExampleWriter(path) as writer:
        for record in range(20):
            steps = [tt.Int64List([t]) for t in tokens(record, "targets", record % 7 + 1)]
            writer.write(tt.encode_sequence_example({"id": record}, {"targets": steps}))
    data = tt.TFRecordDataset(
        str(path), context_spec={"id": "int"}, sequence_spec={"targets": tt.FixedLenSequence((), torch.int64)}
    )
    rows = [
        row
        for batch in tt.pack(data, 16, ["targets"], batch_size=2)
        for row in row_pieces(batch, ["targets"])
    ]
    counts = token_counts(rows)
    assert counts == collections.Counter((r, "targets", j) for r in range(20) for j in range(r % 7 + 1))


def test_bad_input_names_the_key_and_the_record(shards: dict[str, list[str]], tmp_path: Path) -> None:
    with pytest.raises(
        tt.FeatureShapeError,
        match=r"key '(inputs|targets)' of record \d+ of '.*' has \d+ tokens, more than a row's 32; give",
    ):
        tt.pack(source(shards["lognormal"]), LENGTH)
    dropped = tt.pack(source(shards["lognormal"]), LENGTH, drop_long=True)
    too_long = int((DISTRIBUTIONS["lognormal"] > LENGTH).any(axis=1).sum())
    assert dropped.pack_stats().dropped_long == too_long > 0
    path = tmp_path / "floats.tfrecord"
    with tt.ExampleWriter(path) as writer:
        writer.write({"targets": [1, 2]})
        writer.write({"targets": [0.5]})
    with pytest.raises(tt.FeatureTypeError, match=r"'targets'.*record 1 of '.*floats.tfrecord'"):
        tt.pack(tt.TFRecordDataset(str(path)), 8, ["targets"])
    with pytest.raises(
        tt.SpecError,
        match=r"key 'targets' of the dataset's spec is tt.VarLen\(dtype=bytes\), not a 1-D integer",
    ):
        tt.pack(tt.TFRecordDataset(str(path), spec={"targets": "bytes"}), 8, ["targets"])
    with pytest.raises(tt.SpecError, match=r"key 'inputs' is not in the dataset's spec"):
        tt.pack(tt.TFRecordDataset(str(path), spec={"targets": "int"}), 8)
    with pytest.raises(ValueError, match="give it none"):
        tt.pack(source(shards["short"], batch_size=4), LENGTH)
    with pytest.raises(TypeError, match="not a list"):
        tt.pack([1, 2], LENGTH)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clash"):
        tt.pack(source(shards["short"]), LENGTH, ["inputs", "inputs_positions"])


def test_a_state_of_other_data_or_options_is_refused(shards: dict[str, list[str]]) -> None:
    state = tt.pack(source(shards["short"]), LENGTH, batch_size=2).state_dict()
    with pytest.raises(ValueError, match=r"state's options differ from this dataset's in \['buffer_size'\]"):
        tt.pack(source(shards["short"]), LENGTH, batch_size=2, buffer_size=5).load_state_dict(state)
    with pytest.raises(ValueError, match=r"state's data differ from this dataset's in \['seed'\]"):
        tt.pack(source(shards["short"], seed=5), LENGTH, batch_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"data differ .*\['fingerprint', 'num_records'\]"):
        tt.pack(source(shards["sparse"]), LENGTH, split_long=True, batch_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="not a PackedDataset state"):
        tt.pack(source(shards["short"]), LENGTH, batch_size=2).load_state_dict(
            source(shards["short"]).state_dict()
        )


def _damage(path: str, record: int) -> None:
    """Flips a byte in the payload of ``record`` (its data CRC no longer matches)."""
    offset, _ = tt.build_index(path)[record]
    with open(path, "r+b") as file:
        file.seek(int(offset) + 12 + 3)
        byte = file.read(1)
        file.seek(int(offset) + 12 + 3)
        file.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("transform", [None, lambda sample: sample])
def test_damaged_records_skipped_are_counted_and_leave_the_rest_whole(tmp_path: Path, transform: Any) -> None:
    lengths = np.stack([np.full(30, 3), np.arange(30) % 7 + 2], axis=1)
    paths = write_lm(tmp_path, lengths, shards=1)
    _damage(paths[0], 4)  # before the lengths are read: an empty sequence, counted
    packed = tt.pack(
        tt.TFRecordDataset(paths, spec=SPEC, on_error="skip", transform=transform), 16, batch_size=2
    )
    assert packed.pack_stats().skipped == 1
    _damage(paths[0], 9)  # after: its pieces stay empty, the rows keep their shape
    seen = token_counts(row for batch in packed for row in row_pieces(batch))
    assert seen == all_tokens(lengths, [r for r in range(30) if r not in (4, 9)])


def test_a_lengths_cache_is_read_instead_of_the_records(
    shards: dict[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch_tfrecord.data.grouping import lengths as sequence_lengths

    first = tt.pack(source(shards["short"]), LENGTH, batch_size=2, lengths_cache=tmp_path / "lengths")
    saved = list((tmp_path / "lengths").iterdir())
    assert [path.suffix for path in saved] == [".npz"]

    def unread(*args: Any) -> Any:
        raise AssertionError("the records were read again")

    monkeypatch.setattr(sequence_lengths, "_read_lengths", unread)
    again = tt.pack(source(shards["short"]), LENGTH, batch_size=2, lengths_cache=tmp_path / "lengths")
    assert [row for b in again for row in row_pieces(b)] == [row for b in first for row in row_pieces(b)]
    with pytest.raises(AssertionError, match="read again"):  # other keys: another table
        tt.pack(source(shards["short"]), LENGTH, ["targets"], lengths_cache=tmp_path / "lengths")
    saved[0].write_bytes(b"not a table")  # a damaged file is read again, with a warning
    monkeypatch.undo()
    assert len(
        tt.pack(source(shards["short"]), LENGTH, batch_size=2, lengths_cache=tmp_path / "lengths")
    ) == len(first)
