"""tt.beam on Beam's DirectRunner with 2 workers (processes for the write and read, threads where
the test reads Beam's counters); skipped, naming it, where apache-beam is not installed.

Dicts written by WriteExamples come back from ReadExamples and from tt.TFRecordDataset through the
manifest it wrote; reads are split into index ranges; a damaged record fails the read naming its
file, or is skipped and counted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import torch_tfrecord as tt

beam = pytest.importorskip("apache_beam", reason="tt.beam needs apache-beam (the beam extra)")

from apache_beam.metrics.metric import MetricsFilter  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from torch_tfrecord.integrations.beam import ReadExamples, WriteExamples  # noqa: E402
from torch_tfrecord.integrations.ranges import plan_read  # noqa: E402

N = 120
SPEC = {
    "id": tt.FixedLen((), torch.int64),
    "x": tt.FixedLen((2,), torch.float32),
    "tokens": tt.VarLen(torch.int64),
    "name": tt.FixedLen((), str),
}


def _options(mode: str = "multi_processing") -> PipelineOptions:
    return PipelineOptions(runner="DirectRunner", direct_num_workers=2, direct_running_mode=mode)


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "x": [i / 2, -i], "tokens": list(range(i % 4)), "name": f"n{i}"}


def _write(prefix: Path, num_shards: int = 4) -> None:
    with beam.Pipeline(options=_options()) as pipeline:
        _ = (
            pipeline
            | beam.Create([_row(i) for i in range(N)])
            | WriteExamples(prefix, SPEC, num_shards=num_shards)
        )


def test_written_dicts_come_back_from_read_examples_and_the_dataset(tmp_path: Path) -> None:
    prefix = tmp_path / "out" / "train"
    _write(prefix)
    manifest = json.loads((tmp_path / "out" / "train.manifest.json").read_text())
    names = [shard["name"] for shard in manifest["shards"]]
    assert names == [f"train-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert sum(shard["records"] for shard in manifest["shards"]) == N
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [*names, *(f"{name}.idx" for name in names), "train.manifest.json", "train.manifest.tables.npz"]
    )  # no temporary left
    assert set(manifest["spec"]["spec"]) == set(SPEC)

    dataset = tt.TFRecordDataset(str(tmp_path / "out"), spec=SPEC)
    assert dataset.files.feature_spec == manifest["spec"]
    assert sorted(int(sample["id"]) for sample in dataset) == list(range(N))

    def check(row: dict[str, Any]) -> tuple[int, bool]:
        i = int(row["id"])
        want = _row(i)
        same = (
            isinstance(row["x"], np.ndarray)
            and row["x"].tolist() == want["x"]
            and row["tokens"].tolist() == want["tokens"]
            and row["name"] == want["name"]
        )
        return i, same

    with beam.Pipeline(options=_options()) as pipeline:
        rows = pipeline | ReadExamples(str(tmp_path / "out" / "train.manifest.json"), max_range_bytes=1024)
        assert_that(rows | beam.Map(check), equal_to([(i, True) for i in range(N)]))


def test_reads_are_planned_as_index_ranges(tmp_path: Path) -> None:
    prefix = tmp_path / "one" / "train"
    with tt.ShardedExampleWriter(prefix, max_records=1000) as writer:
        for i in range(1000):
            writer.write(_row(i))
    groups = plan_read(str(tmp_path / "one")).ranges(4096)
    size = (tmp_path / "one" / "train-00000-of-00001.tfrecord").stat().st_size
    assert len(groups) == -(-size // 4096) > 5  # one shard, many ranges
    with beam.Pipeline(options=_options("multi_threading")) as pipeline:
        ids = (
            pipeline
            | ReadExamples(str(tmp_path / "one"), SPEC, max_range_bytes=4096)
            | beam.Map(lambda row: int(row["id"]))
        )
        assert_that(ids, equal_to(list(range(1000))))


def test_arrow_output(tmp_path: Path) -> None:
    prefix = tmp_path / "a" / "train"
    with tt.ShardedExampleWriter(prefix, max_records=50) as writer:
        for i in range(100):
            writer.write(_row(i))
    with beam.Pipeline(options=_options("multi_threading")) as pipeline:
        tables = pipeline | ReadExamples(str(tmp_path / "a"), SPEC, output="arrow")
        rows = tables | beam.FlatMap(lambda table: [json.dumps(row) for row in table.to_pylist()])
        # Every column's values, the text column's too (packed: one buffer and offsets a batch).
        expected = [json.dumps({**_row(i), "x": [float(v) for v in _row(i)["x"]]}) for i in range(100)]
        assert_that(rows, equal_to(expected))


def _corrupt(path: Path, record: int) -> None:
    index = [line.split() for line in Path(f"{path}.idx").read_text().splitlines()]
    data = bytearray(path.read_bytes())
    data[int(index[record][0]) + 14] ^= 0xFF  # a byte of the record's data: its CRC no longer matches
    path.write_bytes(bytes(data))


def test_a_damaged_record_fails_naming_its_file_or_is_skipped_and_counted(tmp_path: Path) -> None:
    prefix = tmp_path / "d" / "train"
    with tt.ShardedExampleWriter(prefix, max_records=60) as writer:
        for i in range(N):
            writer.write(_row(i))
    _corrupt(tmp_path / "d" / "train-00001-of-00002.tfrecord", 7)
    failing = beam.Pipeline(options=_options("multi_threading"))
    _ = failing | ReadExamples(str(tmp_path / "d"), SPEC)
    with pytest.raises(Exception, match=r"CRC mismatch in .*train-00001-of-00002\.tfrecord.* at byte \d+"):
        failing.run().wait_until_finish()
    pipeline = beam.Pipeline(options=_options("multi_threading"))
    ids = (
        pipeline
        | ReadExamples(str(tmp_path / "d"), SPEC, on_error="skip")
        | beam.Map(lambda row: int(row["id"]))
    )
    assert_that(ids, equal_to([i for i in range(N) if i != 67]))
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("skipped_records"))["counters"]
    assert sum(counter.committed for counter in counters) == 1
