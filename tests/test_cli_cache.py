"""`torch-tfrecord cache ls|du|verify|clear DIR` on a real cache filled by a dataset (memory://)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.cli.main import main
from torch_tfrecord.records.remote.cache import ShardCache, cache_key

pytest.importorskip("fsspec")


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    with tt.ShardedExampleWriter("memory://cli-cache/train", max_records=100) as writer:
        for i in range(300):
            writer.write({"label": i})
    root = tmp_path / "cache"
    ds = tt.TFRecordDataset(
        "memory://cli-cache/train-*.tfrecord",
        spec={"label": tt.FixedLen((), torch.int64)},
        batch_size=50,
        cache_dir=root,
    )
    assert sorted(i for batch in ds for i in batch["label"].tolist()) == list(range(300))
    return root


def test_ls_du_verify_clear(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = ShardCache(cache_dir)
    shards = [e for e in cache.entries() if e.url.endswith(".tfrecord")]
    assert len(shards) == 3 and all(e.complete for e in shards)
    # What a killed download leaves: a reservation and a part, no lock held. `ls` cleans it up.
    assert cache.reserve("memory://cli-cache/killed.tfrecord", 10, "")
    Path(cache.part_path(cache_key("memory://cli-cache/killed.tfrecord"))).write_bytes(b"par")
    assert main(["cache", "ls", str(cache_dir)]) == 0
    listing = capsys.readouterr().out
    # 3 shards (their indexes came with the writer's manifest, not through the cache)
    n = len(cache.entries())
    assert n == 3 and listing.count("complete") == n and "killed" not in listing
    assert not list((cache_dir / "partial").iterdir())  # the killed download's part, removed
    assert main(["cache", "du", str(cache_dir)]) == 0
    total = sum(e.size for e in cache.entries())
    assert f"{total:,} bytes in {n} entries ({n} complete)" in capsys.readouterr().out
    assert main(["cache", "verify", str(cache_dir)]) == 0
    assert f"0 damaged copies; {n} complete" in capsys.readouterr().out
    with open(shards[1].path, "r+b") as f:  # a flipped byte in a payload
        f.seek(14)
        byte = f.read(1)
        f.seek(14)
        f.write(bytes([byte[0] ^ 1]))
    assert main(["cache", "verify", str(cache_dir)]) == 1
    out = capsys.readouterr().out
    assert f"damaged: {shards[1].path} (copy of {shards[1].url})" in out and "CRC" in out
    assert main(["cache", "verify", "--remove", str(cache_dir)]) == 1
    assert f"1 damaged copy; {n - 1} complete" in capsys.readouterr().out
    assert main(["cache", "clear", str(cache_dir)]) == 0
    assert f"removed {n - 1} entries" in capsys.readouterr().out
    assert ShardCache(cache_dir).entries() == []


def test_a_directory_that_is_no_cache_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "ls", str(tmp_path)]) == 2
    assert "no cache of remote shards" in capsys.readouterr().err
