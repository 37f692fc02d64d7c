"""``torch-tfrecord bench``: the dataset alone for a few seconds, then the table of its stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.cli import main
from torch_tfrecord.codec.spec_file import encode_spec_json


@pytest.fixture
def shards(tmp_path: Path) -> str:
    with tt.ShardedExampleWriter(str(tmp_path / "data"), max_records=200) as writer:
        for i in range(600):
            writer.write({"label": i, "text": b"x" * (i % 50)})
    return str(tmp_path / "data-*")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_bench_prints_the_table_and_names_a_bottleneck(
    shards: str, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["bench", shards, "--seconds", "0.5", "--batch-size", "64", "--workers", workers])
    out = capsys.readouterr().out
    assert status == 0
    assert "records/s" in out and "ms/batch" in out and "decode" in out
    bottleneck = out.strip().splitlines()[-1]
    assert bottleneck.startswith("bottleneck: ") and bottleneck.split(":")[1].strip() in (
        "read",
        "decode",
        "handoff",
        "none",
    )


def test_bench_takes_a_spec_and_writes_a_trace(
    shards: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(encode_spec_json({"label": tt.FixedLen((), torch.int64)}))
    trace = tmp_path / "trace.json"
    for spec in ('{"label": "int"}', str(spec_file)):
        argv = [
            "bench",
            shards,
            "--seconds",
            "0.3",
            "--spec",
            spec,
            "--shuffle",
            "false",
            "--trace",
            str(trace),
        ]
        assert main(argv) == 0
        assert "trace: " in capsys.readouterr().out
        assert any(event["ph"] == "X" for event in json.loads(trace.read_text())["traceEvents"])


def test_bench_with_loading_threads_and_the_comparison_of_loaders(
    shards: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", shards, "--seconds", "0.3", "--batch-size", "64", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "records/s" in out and "0 workers" in out and "handoff" not in out
    compare = ["bench", shards, "--seconds", "0.3", "--batch-size", "64", "--compare", "--threads", "2"]
    for step in ([], ["--step-ms", "2"]):
        argv = [*compare, *step]
        assert main(argv) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines[0].startswith("loader (a 2 ms training step)" if step else "loader (no training step)")
        rows = {line.split("  ")[0]: float(line.split()[-2].replace(",", "")) for line in lines[1:5]}
        assert list(rows) == [
            "main process alone (threads=0)",
            "threads=2",
            "threads=2, process=True",
            "DataLoader(num_workers=2)",
        ]
        assert all(rate > 0 for rate in rows.values())
        fastest = max(rows, key=rows.__getitem__)
        assert lines[-1].startswith(f"fastest here: {fastest}: ")
        if step:  # 2 ms a batch of 64 records: at most 32,000 records/s, whichever loads
            assert all(rate < 32_000 for rate in rows.values()), rows


def test_bench_refuses_nonsense(shards: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", shards, "--workers", "-1"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert main(["bench", shards, "--threads", "-1"]) == 2
    assert "--threads" in capsys.readouterr().err
    assert main(["bench", shards, "--step-ms", "-1"]) == 2
    assert "--step-ms" in capsys.readouterr().err
    assert main(["bench", shards, "--threads", "2", "--workers", "2"]) == 2
    assert "--workers 0" in capsys.readouterr().err
    assert main(["bench", shards, "--spec", "[1, 2]"]) == 2
    assert "JSON object" in capsys.readouterr().err
    assert main(["bench", shards, "--spec", '{"label": "integer"}']) == 2
    assert "unknown shorthand" in capsys.readouterr().err
