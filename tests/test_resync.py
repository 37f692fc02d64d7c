"""Reading past damage: ``on_error="skip"`` resumes at the next intact record and says what was lost.

A thousand records with damage of each kind (a flipped payload byte, a flipped length byte, a cut
out of the middle, garbage between records): every intact record comes back, byte for byte and
in order, and each damaged region is reported with its offsets and, where knowable, its records.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.records.framing import decode_header, encode_record, header_is_valid
from torch_tfrecord.records.index import load_index
from torch_tfrecord.records.resync import header_candidates

N = 1000


def _records(n: int = N, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(0, 300)) + b"record %06d" % i for i in range(n)]


def _layout(records: list[bytes]) -> tuple[bytes, list[int]]:
    framed = [encode_record(r) for r in records]
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in framed])]).tolist()
    return b"".join(framed), offsets


pytestmark = pytest.mark.usefixtures("each_reader")  # every test with both readers


def _skip_read(path: Path, **kwargs: object) -> tuple[list[bytes], tt.ReadStats]:
    stats = tt.ReadStats()
    return list(tt.read_records(path, on_error="skip", stats=stats, **kwargs)), stats  # type: ignore[arg-type]


def test_every_intact_record_of_a_thousand_survives_four_kinds_of_damage(tmp_path: Path) -> None:
    records = _records()
    data, offsets = _layout(records)
    damaged = bytearray(data)
    damaged[offsets[100] + 12 + 5] ^= 0x01  # a payload byte of record 100
    damaged[offsets[300] + 3] ^= 0x40  # a length byte of record 300
    garbage = random.Random(1).randbytes(777)
    # cut bytes from inside record 500 to inside record 510; garbage before record 800
    cut_from, cut_to = offsets[500] + 30, offsets[510] + 7
    damaged = damaged[:cut_from] + damaged[cut_to : offsets[800]] + garbage + damaged[offsets[800] :]
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(damaged))

    with pytest.raises(tt.CorruptRecordError, match="record 100"):
        list(tt.read_records(path))  # as TensorFlow does, a plain read stops at the first damage
    kept, stats = _skip_read(path)
    lost = {100, 300, *range(500, 511)}
    assert kept == [r for i, r in enumerate(records) if i not in lost]
    shift = cut_to - cut_from
    regions = [(r.start, r.end, r.records, r.first_record) for r in stats.damaged]
    assert regions == [
        (offsets[100], offsets[101], 1, 100),  # the header is sound: exactly one record lost
        (offsets[300], offsets[301], None, 300),  # a damaged header: the count is unknown
        (offsets[500], offsets[511] - shift, None, None),  # numbering was lost at record 300
        (offsets[800] - shift, offsets[800] - shift + len(garbage), None, None),
    ]
    assert stats.bytes_skipped == sum(end - start for start, end, *_ in regions)
    assert stats.records_skipped == 1 and stats.records == len(kept) and stats.files_skipped == 0
    assert len(stats.errors) == 4 and "an unknown number of records" in stats.errors[2]


def test_a_byte_range_stops_at_its_end_inside_damage(tmp_path: Path) -> None:
    records = _records(20)
    data, offsets = _layout(records)
    damaged = bytearray(data)
    damaged[offsets[5] + 1] ^= 0xFF  # record 5's header
    path = tmp_path / "d.tfrecord"
    path.write_bytes(bytes(damaged))
    kept, stats = _skip_read(path, byte_range=(offsets[3], offsets[10]))
    assert kept == records[3:5] + records[6:10]
    kept, stats = _skip_read(path, byte_range=(0, offsets[5] + 3))
    assert kept == records[:5] and [(r.start, r.end) for r in stats.damaged] == [(offsets[5], offsets[5] + 3)]


def test_damage_at_the_end_is_reported_to_the_end(tmp_path: Path) -> None:
    records = _records(10)
    data, offsets = _layout(records)
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(data[: offsets[9] + 20])
    kept, stats = _skip_read(path)
    assert kept == records[:9]
    [region] = stats.damaged
    assert (region.start, region.end, region.records) == (offsets[9], offsets[9] + 20, None)


def test_long_garbage_is_searched_in_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage longer than a read buffer, and a record longer than one, on both sides of it."""
    monkeypatch.setattr("torch_tfrecord.records.scan.CHUNK", 4096)
    big = random.Random(2).randbytes(20_000)
    records = [b"a", big, b"b"]
    garbage = bytes(30_000) + random.Random(3).randbytes(30_000)  # zeros: length 0 fits everywhere
    path = tmp_path / "g.tfrecord"
    path.write_bytes(encode_record(b"a") + garbage + encode_record(big) + encode_record(b"b"))
    kept, stats = _skip_read(path)
    assert kept == records and stats.bytes_skipped == len(garbage)


def test_candidates_match_a_byte_by_byte_search() -> None:
    rng = random.Random(4)
    buffer = rng.randbytes(3000) + encode_record(b"abc") + bytes(200) + encode_record(b"") + rng.randbytes(50)
    for limit in (len(buffer), None):
        found = header_candidates(buffer, 0, len(buffer) - 11, 0, limit).tolist()
        expected = [
            p
            for p in range(len(buffer) - 11)
            if header_is_valid(buffer, p) and (limit is None or p + decode_header(buffer, p)[0] + 16 <= limit)
        ]
        assert found == expected and 3000 in found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    damage=st.lists(
        st.tuples(
            st.sampled_from(["flip", "overwrite", "insert", "delete"]), st.floats(0, 1), st.integers(1, 64)
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_random_damage_never_invents_a_record_nor_loses_an_untouched_one(
    tmp_path: Path, seed: int, damage: list[tuple[str, float, int]]
) -> None:
    """What skip guarantees, for payloads that hold no framed records themselves: the records it
    returns are records that were written, in order; and every record none of whose framed bytes
    was touched by damage comes back. (A position inside damage or a payload passes both CRC
    checks with odds of about 2**-64, which no test of this size meets.)"""
    records = _records(60, seed)
    data, offsets = _layout(records)
    rng = random.Random(seed)
    buffer = bytearray(data)
    touched = np.zeros(len(data), dtype=bool)  # original bytes changed, or split by new bytes
    origin = list(range(len(data)))  # the original offset of each byte of the damaged file (-1: new)
    record_of = np.searchsorted(offsets, np.arange(len(data)), side="right") - 1
    for kind, where, size in damage:
        at = int(where * (len(buffer) - 1))
        if kind == "flip":
            buffer[at] ^= 1 << rng.randrange(8)
            if origin[at] >= 0:
                touched[origin[at]] = True
        elif kind == "overwrite":
            for i in range(at, min(at + size, len(buffer))):
                buffer[i] = rng.randrange(256)
                if origin[i] >= 0:
                    touched[origin[i]] = True
        elif kind == "insert":
            before, after = (origin[at - 1] if at else -1), origin[at]
            if before >= 0 and after >= 0 and record_of[before] == record_of[after]:
                touched[after] = True  # new bytes inside a record; between two, neither is hit
            buffer[at:at] = rng.randbytes(size)
            origin[at:at] = [-1] * size
        else:
            for i in range(at, min(at + size, len(origin))):
                if origin[i] >= 0:
                    touched[origin[i]] = True
            del buffer[at : at + size]
            del origin[at : at + size]
    path = tmp_path / f"random-{seed}.tfrecord"
    path.write_bytes(bytes(buffer))
    # The file is read as the plain file it was: damage at byte 0 may happen to spell a ZLIB
    # header, which compression="auto" would then believe (a valid TFRecord header wins; a
    # damaged one cannot).
    kept, stats = _skip_read(path, compression=None)
    positions = {r: i for i, r in enumerate(records)}
    numbers = [positions.get(r, -1) for r in kept]
    assert -1 not in numbers and numbers == sorted(numbers)  # nothing invented, order kept
    untouched = [i for i in range(len(records)) if not touched[offsets[i] : offsets[i + 1]].any()]
    assert set(untouched) <= set(numbers)
    assert stats.bytes_skipped == len(buffer) - sum(len(encode_record(r)) for r in kept)


def test_verify_lists_every_damaged_region(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_tfrecord.cli import main

    records = _records(50)
    data, offsets = _layout(records)
    damaged = bytearray(data)
    damaged[offsets[10] + 14] ^= 0x02
    damaged = damaged[: offsets[30]] + b"garbage!" * 5 + damaged[offsets[30] :]
    path = tmp_path / "v.tfrecord"
    path.write_bytes(bytes(damaged))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"bytes {offsets[10]}..{offsets[11]} (" in out and "1 record lost from record 10" in out
    assert f"bytes {offsets[30]}..{offsets[30] + 40} (40 bytes)" in out
    assert "2 problems" in out and "2 damaged regions" in out and "49 intact records read" in out


def test_index_of_the_intact_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from index_tools.cli import main as index_main

    records = _records(100)
    data, offsets = _layout(records)
    damaged = bytearray(data)
    damaged[offsets[40] + 2] ^= 0x08  # record 40's length
    path = tmp_path / "i.tfrecord"
    path.write_bytes(bytes(damaged))
    with pytest.raises(tt.CorruptRecordError, match="record 40"):
        tt.build_index(path)
    stats = tt.ReadStats()
    table = tt.build_index(path, on_error="skip", stats=stats)
    expected = [[offsets[i], offsets[i + 1] - offsets[i]] for i in range(100) if i != 40]
    assert table.tolist() == expected
    assert [(r.start, r.end) for r in stats.damaged] == [(offsets[40], offsets[41])]
    assert index_main(["build", "-j", "1", "-q", str(path), "--on-error", "skip"]) == 1
    captured = capsys.readouterr()
    assert "1 damaged region left out of the index" in captured.err
    assert f"bytes {offsets[40]}..{offsets[41]}" in captured.err
    # Run again: that index is fresh (not rebuilt), and its damaged region is listed again.
    assert index_main(["build", "-j", "1", "-q", str(path), "--on-error", "skip"]) == 1
    captured = capsys.readouterr()
    assert "0 indexed, 1 already fresh" in captured.out and "1 with damaged regions left out" in captured.out
    assert f"bytes {offsets[40]}..{offsets[41]}" in captured.err
    assert index_main(["build", "-j", "1", "-q", str(path)]) == 1  # strict: stale, rebuilt, fails
    assert "(record 40)" in capsys.readouterr().err
    index_path = tt.default_index_path(path)
    with pytest.raises(tt.StaleIndexError, match="leaves a gap"):
        load_index(index_path, data_path=path)  # strict by default
    loaded = load_index(index_path, data_path=path, allow_damaged_gaps=True)
    assert loaded.tolist() == expected
    assert list(tt.read_records(path, entries=loaded)) == records[:40] + records[41:]
    with path.open("ab") as f:
        f.write(encode_record(b"appended"))  # a gap holding an intact record: stale still
    with pytest.raises(tt.StaleIndexError, match="grew"):
        load_index(index_path, data_path=path, allow_damaged_gaps=True)


def test_a_dataset_with_on_error_skip_reads_every_intact_record_of_a_damaged_file(tmp_path: Path) -> None:
    import torch

    records = [tt.encode_example({"id": i}) for i in range(200)]
    data, offsets = _layout(records)
    damaged = bytearray(data)
    damaged[offsets[50] + 1] ^= 0x20  # record 50's length: no index can be built past it plainly
    damaged = damaged[: offsets[120]] + b"\x00garbage" * 9 + damaged[offsets[120] :]
    path = tmp_path / "d.tfrecord"
    path.write_bytes(bytes(damaged))
    spec = {"id": tt.FixedLen((), torch.int64)}
    with pytest.raises(tt.CorruptRecordError, match="record 50"):
        tt.TFRecordDataset(path, spec=spec)
    intact = [i for i in range(200) if i != 50]

    def ids(dataset: tt.TFRecordDataset) -> list[int]:
        return sorted(int(s["id"]) for s in dataset if not s[tt.PADDING_KEY])

    dataset = tt.TFRecordDataset(path, spec=spec, shuffle=False, drop_last=False, on_error="skip")
    assert dataset.num_records == 199 and ids(dataset) == intact  # indexed in memory, gaps left out
    tt.save_index(tt.build_index(path, on_error="skip"), tt.default_index_path(path))
    with pytest.raises(tt.StaleIndexError, match="leaves a gap"):
        tt.TFRecordDataset(path, spec=spec)  # such an index is taken only where skipping is asked
    dataset = tt.TFRecordDataset(path, spec=spec, shuffle=False, drop_last=False, on_error="skip")
    assert ids(dataset) == intact
