from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from index_tools.cli import main
from torch_tfrecord import ShardedExampleWriter, TFRecordError


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with ShardedExampleWriter(tmp_path / "d" / "train", max_records=4, write_index=False) as writer:
        for i in range(10):
            writer.write(b"x" * i)
    return tmp_path / "d"


def test_build_check_stats(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(data_dir)]) == 1
    assert capsys.readouterr().out.count("MISSING") == 3
    assert main(["build", str(data_dir), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 files: 3 indexed, 0 already fresh, 0 failed; 10 records" in out and "records/s" in out
    assert main(["build", str(data_dir / "train-*")]) == 0
    assert capsys.readouterr().out == "3 files: 0 indexed, 3 already fresh, 0 failed\n"  # no rate of nothing
    assert main(["check", str(data_dir)]) == 0
    assert "all indexes are fresh" in capsys.readouterr().out
    assert main(["stats", str(data_dir)]) == 0
    total = capsys.readouterr().out.strip().splitlines()[-1].split()
    # 10 records, 45 payload bytes + 16 each, payload sizes 0..9 (mean 4.5).
    assert total == ["10", "205", "0", "4.5", "9", "TOTAL"]


def test_build_failure_exit_status(
    data_dir: Path, records_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copyfile(records_dir / "flipped_payload.tfrecord", data_dir / "bad.tfrecord")
    assert main(["build", str(data_dir)]) == 0  # headers are intact
    assert main(["build", "--force", "--verify-crc", "-q", str(data_dir)]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err and "data CRC mismatch" in captured.err
    assert "1 failed" in captured.out


def test_check_reports_stale(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["build", str(data_dir)])
    shard = sorted(data_dir.glob("*.tfrecord"))[0]
    with open(shard, "ab") as f:
        f.write(b"appended")
    capsys.readouterr()
    assert main(["check", "-q", str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert "STALE" in out and "grew" in out and "1 of 3 indexes is missing, stale or unreadable" in out


def test_out_dir_and_missing_source(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", str(data_dir), "--out-dir", str(tmp_path / "idx")]) == 0
    assert main(["check", str(data_dir), "--index-dir", str(tmp_path / "idx")]) == 0
    assert main(["build", str(tmp_path / "nothing-*")]) == 2
    assert "glob matches no data file" in capsys.readouterr().err


def test_module_entry_point(data_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "index_tools", "build", str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "3 indexed" in result.stdout


def test_no_command_imports_torch(data_dir: Path, records_dir: Path) -> None:
    data, plain, out = str(data_dir), str(records_dir / "plain.tfrecord"), str(data_dir / "idx")
    code = f"""
import sys
from index_tools.cli import main
assert main(["build", {data!r}, "--jobs", "2"]) == 0
assert main(["build", {data!r}, {plain!r}, "--out-dir", {out!r}]) == 0
assert main(["check", {data!r}]) == 0
assert main(["stats", {data!r}]) == 0
loaded = sorted(name for name in sys.modules if name == "torch" or name.startswith("torch."))
assert not loaded, loaded
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "3 indexed" in result.stdout and "TOTAL" in result.stdout


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nothing-*")
    assert main(["build", missing]) == 2
    assert "tfrecord-index: error:" in capsys.readouterr().err
    for argv in (["--debug", "build", missing], ["build", missing, "--debug"], ["check", missing, "--debug"]):
        with pytest.raises(TFRecordError, match="glob matches no data file"):
            main(argv)


def test_compressed_files_get_a_compressed_index_that_check_and_stats_know(
    data_dir: Path, records_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "-q", "-j", "1", str(data_dir)]) == 0
    gz, zz = data_dir / "more.tfrecord.gz", data_dir / "more-zlib.tfrecord"
    shutil.copyfile(records_dir / "gzip.tfrecord.gz", gz)
    shutil.copyfile(records_dir / "zlib_nosuffix.tfrecord", zz)
    capsys.readouterr()
    assert main(["check", str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert f"MISSING    {gz}: no index at '{gz}.cidx'" in out and f"{zz}.cidx" in out
    assert main(["build", "-q", "-j", "1", str(data_dir)]) == 0
    assert "2 indexed, 3 already fresh" in capsys.readouterr().out
    assert main(["check", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert f"FRESH      {gz}: 11 records (GZIP: positions and seek points)" in out
    assert f"FRESH      {zz}: 11 records (ZLIB" in out and "all indexes are fresh" in out
    assert main(["stats", str(gz), str(zz)]) == 0
    out = capsys.readouterr().out
    assert f"{gz} (GZIP)" in out and f"{zz} (ZLIB)" in out and "TOTAL" in out
    with open(gz, "ab") as f:  # appended to: stale, as for offset indexes
        f.write(b"\0" * 10)
    assert main(["check", str(gz)]) == 1
    assert "STALE" in capsys.readouterr().out
