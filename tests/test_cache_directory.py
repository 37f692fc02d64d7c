"""The node cache's directory as an attack surface (issue 44): links planted at its names, other
users' directories, objects named like its own files, malformed metadata, two jobs' limits, a
read-only or full directory, and a poisoned copy. Objects live in fsspec's memory:// store.

Run as root (as CI is), the other user's directory is a real chown to ``nobody`` and the
read-only and full directories are real tmpfs mounts (skipped where mounting is not allowed);
as another user, a chmod makes the directory read-only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.cli.main import main
from torch_tfrecord.records import remote
from torch_tfrecord.records.remote.cache import CacheLimitError, ShardCache, cache_key
from torch_tfrecord.records.remote.cache_dir import CacheDirectoryError, CacheWriteError
from torch_tfrecord.records.remote.cached import CachedFile, download

pytest.importorskip("fsspec")

NOBODY = 65534
SPEC = {"id": tt.FixedLen((), torch.int64), "blob": tt.FixedLen((), bytes)}


def _object(url: str, size: int = 50_000) -> bytes:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    remote.write_bytes(url, data)
    return data


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextlib.contextmanager
def _mounted(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs at ``path`` (root only): skips where mounting is not allowed."""
    path.mkdir(exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[Path]:
    """A directory this process cannot write: a read-only tmpfs as root, else a chmod."""
    if os.geteuid() == 0:
        with _mounted(path, "ro,size=1m") as mounted:
            yield mounted
        return
    path.mkdir()
    path.chmod(0o500)
    try:
        yield path
    finally:
        path.chmod(0o700)


def test_new_directories_and_files_are_private(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c", "1MB")
    assert cache.put_bytes("s3://b/x.idx", "v", b"12 34\n")
    assert _mode(cache.root) == 0o700
    for sub in ("copies", "meta", "partial", "locks", "hints"):
        assert _mode(os.path.join(cache.root, sub)) == 0o700, sub
    assert _mode(cache.path(cache_key("s3://b/x.idx"))) == 0o600
    assert _mode(cache.meta_path(cache_key("s3://b/x.idx"))) == 0o600
    assert _mode(os.path.join(cache.root, "cache.json")) == 0o600


def test_a_link_planted_at_a_download_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    cache = ShardCache(tmp_path / "c")
    url = "memory://plant/a.tfrecord"
    data = _object(url)
    key = cache_key(url)
    # a link at the partial download's name and at the metadata's: removed, never written through
    os.symlink(victim, cache.part_path(key))
    os.symlink(victim, cache.meta_path(key))
    path = download(cache, url, len(data), "", recheck=False)
    assert path is not None and Path(path).read_bytes() == data and not os.path.islink(path)
    assert stat.S_ISREG(os.lstat(cache.meta_path(key)).st_mode)
    assert victim.read_bytes() == b"precious"
    # planted after the reservation cleared the name: the exclusive creation fails, nothing written
    other = "memory://plant/b.tfrecord"
    assert cache.reserve(other, 10, "")
    os.symlink(victim, cache.part_path(cache_key(other)))
    with pytest.raises(CacheWriteError):
        cache.create_part(cache_key(other))
    assert victim.read_bytes() == b"precious"
    # a copy replaced by a link is no copy
    os.remove(path)
    os.symlink(victim, path)
    assert cache.lookup(url, len(data), "") is None


def test_a_directory_another_user_could_write_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
    else:
        theirs = Path("/usr")  # root's
    with pytest.raises(CacheDirectoryError, match="owned by uid") as caught:
        ShardCache(theirs)
    assert "chgrp" in str(caught.value) and "TORCH_TFRECORD_CACHE_GROUP" in str(caught.value)
    everyone = tmp_path / "everyone"
    everyone.mkdir()
    everyone.chmod(0o777)
    with pytest.raises(CacheDirectoryError, match="writable by every user"):
        ShardCache(everyone)
    everyone.chmod(0o1777)  # sticky, as /tmp: what is inside is made and checked here
    assert ShardCache(everyone).disabled is None
    (everyone / "meta").chmod(0o777)
    with pytest.raises(CacheDirectoryError, match="meta"):
        ShardCache(everyone)
    (everyone / "meta").chmod(0o700)
    if os.geteuid() == 0:  # a directory planted inside by someone else
        os.rmdir(everyone / "hints")
        (everyone / "hints").mkdir(mode=0o700)
        os.chown(everyone / "hints", NOBODY, NOBODY)
        with pytest.raises(CacheDirectoryError, match="hints"):
            ShardCache(everyone)


def test_a_group_shares_a_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user's needs root")
    shared = tmp_path / "shared"
    cache = ShardCache(shared, "1MB", group=NOBODY)
    assert _mode(shared) == 0o2770 and os.stat(shared).st_gid == NOBODY
    assert cache.put_bytes("s3://b/x.idx", "v", b"12 34\n")
    assert _mode(cache.path(cache_key("s3://b/x.idx"))) == 0o660
    for path in [shared, *shared.iterdir()]:
        os.chown(path, NOBODY, NOBODY)  # made by another member of the group
    assert ShardCache(shared, group=str(NOBODY)).get_bytes("s3://b/x.idx", "v") == b"12 34\n"
    with pytest.raises(CacheDirectoryError, match="owned by uid"):
        ShardCache(shared)  # without the group: another user's


def test_objects_named_like_the_caches_files_survive_the_clean_up(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c")
    names = ["s3://b/labels.json", "s3://b/shard.part", "s3://b/shard", "s3://b/x.json.json"]
    for name in names:
        assert cache.put_bytes(name, "v", name.encode())
    cache.recover()
    reopened = ShardCache(tmp_path / "c")
    assert [reopened.get_bytes(name, "v") for name in names] == [name.encode() for name in names]
    assert sorted(e.url for e in reopened.entries()) == sorted(names)


def test_malformed_metadata_is_no_entry_and_ls_du_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ShardCache(tmp_path / "c")
    assert cache.put_bytes("s3://b/good", "v", b"data")
    bad = {
        "nourl": b'{"size": 4, "version": "v"}',
        "list": b"[]",
        "text": b"{not json",
        "deep": b"[" * 100_000,
    }
    for name, text in [*bad.items(), ("link", None)]:
        key = f"0123456789abcdef-{name}"
        Path(cache.path(key)).write_bytes(b"data")  # with a copy: not a download cut off
        if text is None:
            os.symlink(cache.meta_path(cache_key("s3://b/good")), cache.meta_path(key))
        else:
            Path(cache.meta_path(key)).write_bytes(text)
    assert [e.url for e in cache.entries()] == ["s3://b/good"]
    assert len(cache.unreadable()) == 5
    assert main(["cache", "ls", str(cache.root)]) == 0
    out = capsys.readouterr().out
    assert "s3://b/good" in out and out.count("unreadable") == 5
    assert main(["cache", "du", str(cache.root)]) == 0
    assert "4 bytes in 1 entry (1 complete)" in capsys.readouterr().out
    assert main(["cache", "clear", str(cache.root)]) == 0
    assert ShardCache(tmp_path / "c").unreadable() == [] and os.listdir(cache.path("").rstrip("/")) == []


def test_the_first_layout_is_ignored_and_cleared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "old"
    (root / "locks").mkdir(parents=True)
    key = cache_key("s3://b/x.tfrecord")
    (root / key).write_bytes(b"poison")
    (root / f"{key}.json").write_text(json.dumps({"url": "s3://b/x.tfrecord", "size": 6, "version": "v"}))
    cache = ShardCache(root)
    assert cache.lookup("s3://b/x.tfrecord", 6, "v") is None and cache.entries() == []
    assert main(["cache", "du", str(root)]) == 0
    assert "2 files (" in capsys.readouterr().out
    assert main(["cache", "clear", str(root)]) == 0
    assert not (root / key).exists() and cache.old_layout_files() == []


def test_one_limit_per_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    assert ShardCache(root).limit is None  # none named: none recorded
    assert ShardCache(root, "1MB").limit == 10**6  # the first to name one records it
    assert ShardCache(root).limit == 10**6 and ShardCache(root, 10**6).limit == 10**6
    with pytest.raises(CacheLimitError, match="1,000,000 bytes") as caught:
        ShardCache(root, "2MB")
    assert f"torch-tfrecord cache limit {root} 2000000" in str(caught.value)
    running = ShardCache(root)
    assert main(["cache", "limit", str(root), "2MB"]) == 0
    assert "2,000,000 bytes" in capsys.readouterr().out
    assert running.limit_bytes() == 2 * 10**6  # a running job follows at its next reservation
    assert ShardCache(root, "2MB").limit == 2 * 10**6
    assert main(["cache", "limit", str(root), "free"]) == 0
    assert ShardCache(root).limit is None


def test_a_read_only_directory_reads_without_the_cache_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with tt.ShardedExampleWriter("memory://ro/train", max_records=50) as writer:
        for i in range(100):
            writer.write({"id": i, "blob": b"b" * 100})
    with _read_only(tmp_path / "ro") as directory, caplog.at_level(logging.WARNING):
        for _ in range(2):
            ds = tt.TFRecordDataset(
                "memory://ro/train-*.tfrecord", spec=SPEC, batch_size=10, shuffle=False, cache_dir=directory
            )
            assert [i for batch in ds for i in batch["id"].tolist()] == list(range(100))
            assert ds.files.cache is not None and ds.files.cache.disabled is not None
        warnings = [r for r in caplog.records if "cannot be used" in r.getMessage()]
        assert len(warnings) == 1 and str(directory) in warnings[0].getMessage()


def test_a_full_directory_reads_without_the_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = "memory://full/big.tfrecord"
    data = _object(url, 1 << 20)
    with _mounted(tmp_path / "full", "size=256k") as directory, caplog.at_level(logging.WARNING):
        cache = ShardCache(directory, "1GB")  # a limit the disk cannot hold: the write fails
        shard = CachedFile(url, len(data), "", None, cache)
        assert shard.wait() is None  # ENOSPC: not raised, the cache is given up
        assert cache.disabled is not None and "No space left" in cache.disabled
        assert shard.read_ranges([1000, 900_000], [10, 20]) == [data[1000:1010], data[900_000:900_020]]
        assert not os.listdir(directory / "partial")  # the cut-off download is removed
        assert len([r for r in caplog.records if "cannot be used" in r.getMessage()]) == 1


def test_a_write_that_fails_degrades_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC without a mount: the partial download's bytes go to /dev/full."""
    url = "memory://fails/x.tfrecord"
    data = _object(url, 300_000)
    cache = ShardCache(tmp_path / "c")
    made = ShardCache.create_part

    def to_dev_full(self: ShardCache, key: str) -> int:
        os.close(made(self, key))  # the partial download is made as always
        return os.open("/dev/full", os.O_WRONLY)

    monkeypatch.setattr(ShardCache, "create_part", to_dev_full)
    shard = CachedFile(url, len(data), "", None, cache)
    assert shard.wait() is None and cache.disabled is not None and "No space left" in cache.disabled
    assert shard.read_ranges([5], [7]) == [data[5:12]]
    assert not cache.put_bytes("s3://b/x.idx", "v", b"1 2\n")
    assert cache.entries() == [] and not os.listdir(os.path.join(cache.root, "partial"))


def test_a_poisoned_copy_with_the_right_size_and_version_is_fetched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with tt.ShardedExampleWriter("memory://poison/train", max_records=100) as writer:
        for i in range(100):
            writer.write({"id": i, "blob": bytes([i]) * 200})
    url = "memory://poison/train-00000-of-00001.tfrecord"
    truth = remote.read_bytes(url)

    def dataset() -> tt.TFRecordDataset:
        return tt.TFRecordDataset(url, spec=SPEC, batch_size=25, shuffle=False, cache_dir=tmp_path / "c")

    first = dataset()
    assert sum(len(b["id"]) for b in first) == 100
    assert first.files.pool.fetch(0) is not None  # (the download may still be finishing)
    (entry,) = [e for e in ShardCache(tmp_path / "c").entries() if e.url == url]
    assert Path(entry.path).read_bytes() == truth
    # Three records' blobs rewritten (each record keeps its framing, the copy its size and the
    # metadata its version): what a neighbour who could write the directory would serve.
    poisoned = truth
    for i in (0, 7, 99):
        poisoned = poisoned.replace(bytes([i]) * 200, b"P" * 200)
    assert len(poisoned) == len(truth) and poisoned != truth
    Path(entry.path).write_bytes(poisoned)
    with caplog.at_level(logging.WARNING):
        batches = list(dataset())
    assert [bytes(b) for batch in batches for b in batch["blob"]] == [bytes([i]) * 200 for i in range(100)]
    assert any("fetching it again" in r.getMessage() for r in caplog.records)
    assert Path(entry.path).read_bytes() == truth  # the copy is the store's again


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_metadata_file_is_an_entry_or_none(data: bytes) -> None:
    """Property: whatever bytes sit in a metadata file, listing and looking up never fail."""
    from torch_tfrecord.records.remote.cache_entries import entry_meta, read_schedule

    meta = entry_meta(data)
    assert meta is None or (isinstance(meta["url"], str) and meta["size"] >= 0)
    schedule = read_schedule(data)
    assert schedule is None or all(isinstance(k, str) for k in schedule)
