from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from torch_tfrecord.cli import main


def test_count(records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["count", str(records_dir / "plain.tfrecord"), str(records_dir / "gzip.tfrecord.gz")])
    out = capsys.readouterr().out
    assert status == 0
    assert "11  " in out and out.strip().splitlines()[-1].split() == ["22", "total"]


def test_count_reports_damaged_file(records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["count", str(records_dir / "truncated_payload.tfrecord"), str(records_dir / "plain.tfrecord")]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "ERROR" in out and "at byte 56 (record 3)" in out and "11  total" in out


def test_verify_good_and_bad(tmp_path: Path, records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ["plain.tfrecord", "gzip.tfrecord.gz", "flipped_payload.tfrecord"]:
        shutil.copyfile(records_dir / name, tmp_path / name)
    assert main(["verify", str(tmp_path / "plain.tfrecord"), str(tmp_path / "gzip.tfrecord.gz")]) == 0
    assert "2 of 2 files OK" in capsys.readouterr().out
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert (
        "BAD  " in out
        and "1 problem" in out
        and "data CRC mismatch" in out
        and "at byte 56 (record 3)" in out
    )
    assert "2 of 3 files OK" in out


def test_verify_finds_stale_index(
    golden_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = golden_copy("plain.tfrecord")
    (path.parent / "plain.tfrecord.idx").write_text("0 16\n16 17\n")
    assert main(["verify", str(path)]) == 1
    assert "StaleIndexError" in capsys.readouterr().out


def test_missing_source_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(tmp_path / "nope.tfrecord")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_console_script_and_module_entry(records_dir: Path) -> None:
    script = shutil.which("torch-tfrecord", path=str(Path(sys.executable).parent))
    commands = [[sys.executable, "-m", "torch_tfrecord"]] + ([[script]] if script else [])
    for command in commands:
        result = subprocess.run(
            [*command, "count", str(records_dir / "plain.tfrecord")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "11  total" in result.stdout


def test_verify_lists_every_damaged_record_with_its_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch_tfrecord as tt

    path = tmp_path / "two-bad.tfrecord"
    with tt.RecordWriter(str(path), write_index=False) as writer:
        for i in range(5):
            writer.write(bytes([i]) * 20)
    data = bytearray(path.read_bytes())
    for record in (1, 3):  # one payload byte of each: the framing still chains
        data[record * 36 + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "2 problems" in out and "at byte 36 (record 1)" in out and "at byte 108 (record 3)" in out


def test_every_tool_names_the_same_damaged_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes inserted into record 0: its data CRC fails, and the header after it is garbage.
    count, build_index and `tfrecord-index build` (header walks) used to name record 1 there."""
    import torch_tfrecord as tt
    from index_tools.cli import main as index_main
    from torch_tfrecord.framing import encode_record

    first = encode_record(bytes(range(200)))
    framed = first[:80] + b"inserted" + first[80:] + encode_record(b"next") + encode_record(b"last")
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(framed)
    truth = "data CRC mismatch in '" + str(path) + "' at byte 0 (record 0)"
    with pytest.raises(tt.CorruptRecordError, match=r"at byte 0 \(record 0\)") as sequential:
        list(tt.read_records(path))
    assert str(sequential.value).startswith(truth)
    for call in (lambda: tt.count_records(path), lambda: tt.build_index(path)):
        with pytest.raises(tt.CorruptRecordError) as walked:
            call()
        assert str(walked.value) == str(sequential.value) and walked.value.record == 0
    assert main(["count", str(path)]) == 1
    assert truth in capsys.readouterr().out
    assert main(["verify", str(path)]) == 1
    assert truth in capsys.readouterr().out
    assert index_main(["build", "-j", "1", "-q", str(path)]) == 1
    assert truth in capsys.readouterr().err
    # A header that is bad on its own (the record before it intact) is still named as such.
    path.write_bytes(encode_record(b"good") + b"\xff" * 16)
    with pytest.raises(tt.CorruptRecordError, match=r"length CRC mismatch .* at byte 20 \(record 1\)"):
        tt.count_records(path)
