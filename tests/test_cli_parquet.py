"""`torch-tfrecord convert parquet` / `convert from-parquet`: TFRecord -> Parquet -> TFRecord on the
command line, the same Examples back; bad input is one line and exit status 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.cli import main
from torch_tfrecord.codec.spec_file import encode_spec_json

pq = pytest.importorskip("pyarrow.parquet")


def _records(directory: Path) -> list[bytes]:
    return [r for path in sorted(directory.glob("*.tfrecord")) for r in tt.read_records(str(path))]


def _write(path: Path, rows: int) -> list[bytes]:
    records = [
        tt.encode_example(
            {
                "x": tt.FloatList(np.arange(3, dtype=np.float32) + i),
                "label": i,
                "name": f"n{i}",
                "ids": tt.Int64List(range(i % 3)),
            }
        )
        for i in range(rows)
    ]
    with tt.RecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return records


def test_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`convert parquet` in a real process (python -m torch_tfrecord), `from-parquet` by main()."""
    records = _write(tmp_path / "in.tfrecord", 25)
    spec = {"x": tt.FixedLen((3,), torch.float32), "label": tt.FixedLen((), torch.int64),
            "name": tt.FixedLen((), str), "ids": tt.VarLen(torch.int64)}  # fmt: skip
    (tmp_path / "my-spec.json").write_text(encode_spec_json(spec))
    command = [sys.executable, "-m", "torch_tfrecord", "convert"]
    out = tmp_path / "parts"
    done = subprocess.run(
        [*command, "parquet", str(tmp_path / "in.tfrecord"), "--out", str(out), "--rows-per-file", "10",
         "--batch-size", "5", "--spec", str(tmp_path / "my-spec.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "25 rows in 3 Parquet files" in done.stdout
    parts = sorted(out.glob("*.parquet"))
    assert [pq.read_metadata(p).num_rows for p in parts] == [10, 10, 5]
    assert pq.read_table(parts[0]).column("x").to_pylist()[1] == [1.0, 2.0, 3.0]
    back = tmp_path / "back"
    assert main(["convert", "from-parquet", str(out), "--out", str(back), "--shard-size", "10"]) == 0
    assert "25 records in 3 shards" in capsys.readouterr().out
    assert _records(back) == records  # byte for byte
    assert (back / "spec.json").exists()
    assert tt.IndexedTFRecordDataset(str(back))._decoder.feature_spec == spec


def test_spec_beside_the_sources_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shards written by tt.write_dataset convert with no --spec: their spec.json says the types
    (int32 stays int32 in Parquet, which inference from the records could not know)."""
    samples = [{"a": torch.tensor(i, dtype=torch.int32), "b": [1.0 * i, 2.0]} for i in range(6)]
    tt.write_dataset(samples, str(tmp_path / "ds"))
    out = tmp_path / "a.parquet"
    assert main(["convert", "parquet", str(tmp_path / "ds"), "--out", str(out), "-q"]) == 0
    assert "6 rows in 1 Parquet file" in capsys.readouterr().out
    table = pq.read_table(out)
    assert str(table.schema.field("a").type) == "int32"
    assert table.column("b").to_pylist()[3] == [3.0, 2.0]


def test_bad_records_are_one_line_and_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.tfrecord"
    with tt.ExampleWriter(str(path)) as writer:
        for i in range(4):
            writer.write({"a": i} if i != 2 else {"a": "two"})
    (tmp_path / "spec.json").write_text(encode_spec_json({"a": tt.FixedLen((), torch.int64)}))
    out = tmp_path / "out.parquet"
    assert main(["convert", "parquet", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("torch-tfrecord: error:")
    assert "'a'" in err and "record 2" in err
    assert not out.exists()  # nothing under the final name


def test_bad_parquet_is_status_1_and_missing_input_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pa = pytest.importorskip("pyarrow")
    maps = pa.array([{"k": 1}], pa.map_(pa.string(), pa.int64()))
    pq.write_table(pa.table({"m": maps}), tmp_path / "bad.parquet")
    assert main(["convert", "from-parquet", str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column 'm'" in err and "bad.parquet" in err
    assert not os.path.exists(tmp_path / "o") or not list((tmp_path / "o").glob("*.tfrecord"))
    missing = str(tmp_path / "nothing.parquet")
    assert main(["convert", "from-parquet", missing, "--out", str(tmp_path / "o")]) == 2
    assert "nothing.parquet" in capsys.readouterr().err
    assert main(["convert", "parquet", str(tmp_path / "none.tfrecord"), "--out", str(tmp_path / "x")]) == 2
    assert "none.tfrecord" in capsys.readouterr().err
    (tmp_path / "other.json").write_text('{"a": 1}')
    _write(tmp_path / "in.tfrecord", 2)
    args = ["convert", "parquet", str(tmp_path / "in.tfrecord"), "--out", str(tmp_path / "x.parquet")]
    assert main([*args, "--spec", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err
    assert "other.json" in err and "not a torch-tfrecord spec" in err
