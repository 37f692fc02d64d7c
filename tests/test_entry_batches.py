"""read_records(entries=...)'s native batch read (records/entry_batches.py) against the stream read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tfrecord.records.entry_batches as batches
from torch_tfrecord import ReadStats, TFRecordError, build_index, read_records
from torch_tfrecord.records.framing import encode_record
from torch_tfrecord.support.extension import compiled

pytestmark = pytest.mark.skipif(compiled is None, reason="the native extension is not built")


def outcome(path: Path, reader: str, entries: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What an index read gives with ``reader`` (``TORCH_TFRECORD_DECODER``; "python" takes the
    stream read): records, then the error (class, message, file, offset, record) and the records
    before it, and what on_error="skip" returns and counts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_TFRECORD_DECODER", reader)
        records: list[bytes] = []
        error = None
        try:
            records.extend(read_records(path, entries=entries, **kwargs))
        except TFRecordError as caught:
            where = tuple(getattr(caught, name, None) for name in ("path", "offset", "record"))
            error = (type(caught), str(caught), *where)
        stats = ReadStats()
        skipped = list(read_records(path, entries=entries, on_error="skip", stats=stats, **kwargs))
    assert all(type(r) is bytes for r in records + skipped)
    return records, error, skipped, stats


def write(path: Path, payloads: list[bytes]) -> np.ndarray:
    path.write_bytes(b"".join(encode_record(p) for p in payloads))
    return np.asarray(build_index(path))


@settings(deadline=None, max_examples=100)
@given(
    payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=30),
    picks=st.lists(st.integers(0, 1 << 16), max_size=60),
    odd_rows=st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["past", "size", "shift"])), max_size=3),
    damage=st.one_of(
        st.none(),
        st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),
        st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.just(0)),
    ),
    batch=st.sampled_from([1, 3, 1024]),
    mapped_from=st.sampled_from([0, 1 << 20]),
    verify_crc=st.booleans(),
    numbered=st.booleans(),
)
def test_the_batch_read_and_the_stream_read_agree(
    payloads: list[bytes],
    picks: list[int],
    odd_rows: list[tuple[int, str]],
    damage: tuple[str, int, int] | None,
    batch: int,
    mapped_from: int,
    verify_crc: bool,
    numbered: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Records, errors (class, message, file, offset, record) and skips are the same through the
    native batch read and the stream read: entries in any order and repeated, damaged records,
    rows that do not describe their record or lie past the file's end, batches of any size,
    records copied from the file's mapping or read with preads."""
    path = tmp_path_factory.mktemp("agree") / "f.tfrecord"
    table = write(path, payloads)
    rows = table[[pick % len(table) for pick in picks]].tolist()
    size = path.stat().st_size
    for at, kind in odd_rows:
        row = list(table[at % len(table)])
        if kind == "past":
            row[1] += size
        elif kind == "size":
            row[1] += 1
        else:
            row[0] += 1
        rows.insert(at % (len(rows) + 1), row)
    if damage is not None:
        data = bytearray(path.read_bytes())
        kind, where, bit = damage
        where %= len(data)
        if kind == "flip":
            data[where] ^= 1 << bit
        else:
            del data[where:]
        path.write_bytes(bytes(data))
    entries = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    kwargs: dict[str, Any] = {"verify_crc": verify_crc}
    if numbered:  # runs end where numbers stop being consecutive, as the stream read's do
        kwargs["record_numbers"] = [int(np.searchsorted(table[:, 0], offset)) for offset in entries[:, 0]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batches, "_BATCH_ENTRIES", batch)
        patch.setattr(batches, "_MAPPED_MIN_ENTRIES", mapped_from)
        assert outcome(path, "native", entries, **kwargs) == outcome(path, "python", entries, **kwargs)


def test_corrupt_records_and_rows_past_the_end_read_the_same(tmp_path: Path) -> None:
    """The batch read hands what it cannot take to the stream read: the records before the first
    damaged one, its error, and with on_error="skip" every good record, as the stream read gives."""
    path = tmp_path / "f.tfrecord"
    payloads = [i.to_bytes(2, "little") * (i % 7 + 1) for i in range(300)]
    table = write(path, payloads)
    data = bytearray(path.read_bytes())
    data[int(table[40, 0]) + 13] ^= 1  # record 40's payload
    data[int(table[200, 0])] ^= 1  # record 200's length field
    path.write_bytes(bytes(data))
    order = np.random.default_rng(0).permutation(300)
    past_end = np.array([[table[-1, 0], table[-1, 1] + 8]])
    for entries in (table[order], table, np.concatenate([table[:100], past_end, table[100:]])):
        native = outcome(path, "native", entries)
        assert native == outcome(path, "python", entries)
        _, error, skipped, stats = native
        assert error is not None and error[0].__name__ in ("CorruptRecordError", "StaleIndexError")
        assert stats.records_skipped == len(entries) - len(skipped)
        assert len(skipped) == 298  # all but records 40 and 200 (and the row past the end)
    assert outcome(path, "native", table)[2] == [p for i, p in enumerate(payloads) if i not in (40, 200)]


def test_entries_are_gathered_a_batch_per_native_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.tfrecord"
    payloads = [i.to_bytes(4, "little") * (i % 5) for i in range(2500)]
    table = write(path, payloads)
    calls: list[tuple[int, bool]] = []
    gather = batches.gather

    def spy(ids: Any, *args: Any) -> Any:
        status, value = gather(ids, *args)
        if status == batches.Gathered.DONE:
            calls.append((len(ids), args[4][0] is not None))  # (records, read from the mapping)
        return status, value

    monkeypatch.setattr(batches, "gather", spy)
    order = np.random.default_rng(1).permutation(2500)
    assert list(read_records(path, entries=table[order])) == [payloads[i] for i in order]
    assert calls == [(1024, True), (1024, True), (452, True)]
    calls.clear()
    assert list(read_records(path, entries=table[[2, 3, 4, 8]])) == [payloads[i] for i in (2, 3, 4, 8)]
    assert calls == [(4, False)]  # a few entries: positional reads, no mapping
    calls.clear()
    monkeypatch.setattr(batches, "_BATCH_BYTES", int(table[:10, 1].sum()))
    assert list(read_records(path, entries=table[:25])) == payloads[:25]
    assert [n for n, _ in calls] == [10, 10, 5]  # batches bounded by their bytes too


@pytest.mark.parametrize("mapped_from", [0, 1 << 20])
def test_a_file_cut_shorter_while_read_is_read_the_careful_way(
    mapped_from: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches, "_BATCH_ENTRIES", 50)
    monkeypatch.setattr(batches, "_MAPPED_MIN_ENTRIES", mapped_from)  # copies from a mapping, or preads
    path = tmp_path / "f.tfrecord"
    payloads = [bytes([i]) * 100 for i in range(200)]
    table = write(path, payloads)
    reader = read_records(path, entries=table[::-1])
    assert next(reader) == payloads[-1]  # the file is open and mapped now; its first batch read
    with open(path, "r+b") as file:
        file.truncate(int(table[100, 0]))
    assert [next(reader) for _ in range(49)] == payloads[-2:-51:-1]  # the first batch: read before
    # The next batch's records are gone: neither read goes past the file's end (a mapping's would
    # be a SIGBUS), and the stream read says which entry runs past it.
    with pytest.raises(TFRecordError, match=r"record 50 runs past the end"):
        next(reader)
