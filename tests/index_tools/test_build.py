from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from index_tools import build_indexes, index_path_for, index_status
from torch_tfrecord import ShardedExampleWriter, build_index, load_index, save_index


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    with ShardedExampleWriter(tmp_path / "data" / "train", max_records=7, write_index=False) as writer:
        for i in range(30):
            writer.write(b"r%d" % i * (i + 1))
    return writer.shard_paths


def test_builds_all_in_parallel_and_skips_fresh(shards: list[str]) -> None:
    results = build_indexes(shards, jobs=2)
    assert [r.status for r in results] == ["built"] * 5
    assert [r.records for r in results] == [7, 7, 7, 7, 2]
    for path in shards:
        assert (load_index(path + ".idx", data_path=path) == build_index(path)).all()
    again = build_indexes(shards, jobs=2)
    assert [r.status for r in again] == ["fresh"] * 5 and [r.records for r in again] == [7, 7, 7, 7, 2]
    forced = build_indexes(shards, jobs=1, force=True)
    assert [r.status for r in forced] == ["built"] * 5


def test_stale_index_is_rebuilt(shards: list[str]) -> None:
    save_index(build_index(shards[0])[:3], shards[0] + ".idx")
    assert index_status(shards[0], shards[0] + ".idx").state == "stale"
    results = build_indexes(shards[:1], jobs=1)
    assert results[0].status == "built"
    assert index_status(shards[0], shards[0] + ".idx").state == "fresh"


def test_bad_files_are_reported_and_others_finish(
    shards: list[str], records_dir: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "data" / "bad.tfrecord"
    shutil.copyfile(records_dir / "truncated_payload.tfrecord", bad)
    gz = tmp_path / "data" / "c.tfrecord.gz"
    shutil.copyfile(records_dir / "gzip.tfrecord.gz", gz)
    cut = tmp_path / "data" / "cut.tfrecord.gz"
    shutil.copyfile(records_dir / "gzip_truncated.tfrecord.gz", cut)
    results = build_indexes([str(bad), str(gz), str(cut), *shards], jobs=2)
    assert [r.status for r in results] == ["failed", "built", "failed"] + ["built"] * 5
    assert "at byte 56 (record 3)" in (results[0].error or "")
    assert "cut.tfrecord.gz" in (results[2].error or "") and "record" in (results[2].error or "")
    assert not os.path.exists(str(bad) + ".idx") and not os.path.exists(str(cut) + ".cidx")
    # A compressed file gets a compressed index (never the plain .idx name DALI would read).
    assert results[1].index_path == str(gz) + ".cidx" and not os.path.exists(str(gz) + ".idx")
    assert results[1].records == 11 and index_status(gz, results[1].index_path).state == "fresh"


def test_out_dir(shards: list[str], tmp_path: Path) -> None:
    out = tmp_path / "indexes"
    results = build_indexes(shards, jobs=1, out_dir=out)
    assert all(r.index_path.startswith(str(out)) for r in results)
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) + ".idx" for p in shards)
    assert index_status(shards[0], index_path_for(shards[0], out)).state == "fresh"
    assert not os.path.exists(shards[0] + ".idx")


def test_out_dir_name_collision(tmp_path: Path) -> None:
    for folder in ["a", "b"]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.tfrecord").write_bytes(b"")
    with pytest.raises(ValueError, match="would both write"):
        build_indexes([tmp_path / "a" / "x.tfrecord", tmp_path / "b" / "x.tfrecord"], out_dir=tmp_path / "o")


def test_status_states(shards: list[str]) -> None:
    assert index_status(shards[0], shards[0] + ".idx").state == "missing"
    Path(shards[0] + ".idx").write_text("garbage\n")
    check = index_status(shards[0], shards[0] + ".idx")
    assert check.state == "unreadable" and "line 1" in check.detail


def test_workers_start_only_for_files_that_need_an_index(
    shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from index_tools import build as build_module

    started: list[int] = []
    real = build_module.worker_processes

    def spy(jobs: int):  # type: ignore[no-untyped-def]
        started.append(jobs)
        return real(jobs)

    monkeypatch.setattr(build_module, "worker_processes", spy)
    assert [r.status for r in build_indexes(shards[:2], jobs=4)] == ["built"] * 2
    assert started == [2]  # no more processes than files to index
    build_indexes(shards[2:], jobs=1)
    started.clear()
    assert [r.status for r in build_indexes(shards, jobs=4)] == ["fresh"] * 5
    assert started == []  # every index fresh: nothing is spawned
    save_index(build_index(shards[3])[:2], shards[3] + ".idx")
    results = build_indexes(shards, jobs=4)
    assert [r.status for r in results] == ["fresh", "fresh", "fresh", "built", "fresh"]
    assert started == []  # one file to index: built in this process
    assert results[3].records == 7 and index_status(shards[3], shards[3] + ".idx").state == "fresh"
