"""`tfrecord-index`: build, check and summarise TFRecord index files; select records.

tfrecord-index build data/train-*.tfrecord --jobs 8
tfrecord-index check data/
tfrecord-index stats data/
tfrecord-index manifest 'gs://bucket/train-*.tfrecord'
tfrecord-index select 'data/train-*.tfrecord' --where 'label == 3' --out label3.ttsel

Errors are one line (``tfrecord-index: error: ...``); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from torch_tfrecord.cli.options import (
    add_command,
    add_debug_option,
    add_storage_options,
    storage_options,
)
from torch_tfrecord.errors import TFRecordError
from torch_tfrecord.records.compressed.index import CompressedIndex
from torch_tfrecord.records.listing import expand_sources
from torch_tfrecord.records.shards.index import load_shard_index
from torch_tfrecord.support.processes import WorkerDiedError
from torch_tfrecord.support.text import plural, progress_bar

from .build import BuildResult, build_indexes, index_path_for, index_status

__all__ = ["main"]


def _cmd_build(args: argparse.Namespace) -> int:
    # The damaged regions are listed below: their warnings are not logged as well (for this
    # command only: a caller that runs main() in its own process keeps its logging).
    names = ("torch_tfrecord.records.reader", "torch_tfrecord.records.compressed.inflate")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        return _build(args)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _build(args: argparse.Namespace) -> int:
    options = storage_options(args)
    paths = expand_sources(args.paths, options)
    bar = progress_bar(len(paths), "file", not args.quiet and sys.stderr.isatty())
    start = time.perf_counter()

    def on_result(result: BuildResult) -> None:
        if bar is not None:
            bar.update(1)
        messages = [f"FAILED {result.path}: {result.error}"] if result.status == "failed" else []
        if result.damaged:
            messages.append(
                f"DAMAGED {result.path}: {plural(len(result.damaged), 'damaged region')} "
                "left out of the index"
            )
            messages += [f"        {region}" for region in result.damaged]
        for message in messages:
            if bar is not None:
                bar.write(message, file=sys.stderr)
            else:
                print(message, file=sys.stderr)

    try:
        results = build_indexes(
            paths,
            jobs=args.jobs,
            force=args.force,
            verify_crc=args.verify_crc,
            on_error=args.on_error,
            out_dir=args.out_dir,
            on_result=on_result,
            storage_options=options,
        )
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    built = [r for r in results if r.status == "built"]
    fresh = [r for r in results if r.status == "fresh"]
    failed = [r for r in results if r.status == "failed"]
    records = sum(r.records for r in built)
    size = sum(r.bytes for r in built)
    summary = f"{plural(len(results), 'file')}: {len(built):,} indexed, {len(fresh):,} already fresh"
    summary += f", {len(failed):,} failed"
    damaged = [r for r in results if r.damaged]
    if damaged:
        summary += f", {len(damaged):,} with damaged regions left out"
    if built:
        rate = records / seconds if seconds else 0
        summary += f"; {plural(records, 'record')}, {size / 1e6:,.1f} MB indexed in {seconds:.2f} s"
        summary += f" ({rate:,.0f} records/s)"
    print(summary)
    return 1 if failed or damaged else 0


def _cmd_check(args: argparse.Namespace) -> int:
    bad = 0
    options = storage_options(args)
    paths = expand_sources(args.paths, options)
    for path in paths:
        check = index_status(path, index_path_for(path, args.index_dir, options), options)
        good = check.state == "fresh"
        if not good:
            bad += 1
        if not good or not args.quiet:
            print(f"{check.state.upper():10} {path}: {check.detail}")
    if bad:
        verb = "is" if bad == 1 else "are"
        summary = f"{bad:,} of {plural(len(paths), 'index', 'indexes')} {verb} missing, stale or unreadable"
    else:
        summary = "all indexes are fresh"
    print(summary)
    return 1 if bad else 0


def _cmd_stats(args: argparse.Namespace) -> int:
    print(f"{'records':>12} {'bytes':>14} {'min':>9} {'mean':>11} {'max':>11}  file")
    totals: list[np.ndarray[Any, Any]] = []
    failed = 0
    options = storage_options(args)
    for path in expand_sources(args.paths, options):
        try:
            found = load_shard_index(index_path_for(path, args.index_dir, options), path, options)
        except (TFRecordError, OSError) as error:
            print(f"{'-':>12} {'-':>14} {'-':>9} {'-':>11} {'-':>11}  {path}: {error}")
            failed += 1
            continue
        table = found.table if isinstance(found, CompressedIndex) else found
        payload = table[:, 1] - 16
        totals.append(payload)
        label = path if not isinstance(found, CompressedIndex) else f"{path} ({found.compression.upper()})"
        print(_stats_row(payload, int(table[:, 1].sum()), label))
    if totals:
        payload = np.concatenate(totals)
        print(_stats_row(payload, int(payload.sum() + 16 * len(payload)), "TOTAL"))
    return 1 if failed else 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from torch_tfrecord.records.compressed.index import default_compressed_index_path
    from torch_tfrecord.records.index import default_index_path
    from torch_tfrecord.records.io import exists
    from torch_tfrecord.records.manifest import MANIFEST_SUFFIX, write_manifest
    from torch_tfrecord.records.shards.files import RecordFiles

    options = storage_options(args)
    files = RecordFiles.from_sources(args.paths, storage_options=options, cache_dir=False)
    out = args.out or _default_manifest(files.paths, MANIFEST_SUFFIX)
    compressions = {spec.compressed.compression for spec in files.specs if spec.compressed is not None}
    if compressions and (
        len(compressions) > 1 or len(compressions) != len({s.inflating for s in files.specs})
    ):
        raise ValueError("a manifest lists shards of one kind: all plain, or all compressed the same way")
    indexes = []
    for path, spec in zip(files.paths, files.specs, strict=True):
        index = default_compressed_index_path(path) if spec.inflating else default_index_path(path)
        indexes.append(index if exists(index, options) else None)
    manifest = write_manifest(
        out,
        files.paths,
        [files.tables[shard] for shard in range(len(files.paths))],
        options,
        index_paths=indexes,
        versions=[spec.version for spec in files.specs],
        compression=compressions.pop() if compressions else None,
    )
    records = sum(shard.records for shard in manifest.shards)
    print(f"{out}: {plural(len(manifest.shards), 'shard')}, {plural(records, 'record')}")
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    from torch_tfrecord.data.select.select_records import select

    options = storage_options(args)
    types = {}
    for item in args.type or []:
        key, _, kind = item.rpartition("=")
        if not key or kind not in ("int", "float", "bytes"):
            raise ValueError(f"--type {item!r}: write it as KEY=int, KEY=float or KEY=bytes")
        types[key] = kind
    bar = progress_bar(None, "shard", not args.quiet and sys.stderr.isatty())
    scanned = 0

    def progress(records: int, shard_done: bool) -> None:
        nonlocal scanned
        scanned += records
        if bar is not None:
            bar.set_postfix_str(f"{scanned:,} records", refresh=False)
            bar.update(1 if shard_done else 0)

    start = time.perf_counter()
    try:
        selection = select(
            args.paths,
            where=args.where,
            spec=types or None,
            out=args.out,
            jobs=args.jobs,
            storage_options=options,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    kept, total = len(selection), selection.num_records
    print(
        f"{args.out}: kept {kept:,} of {plural(total, 'record')} ({100 * kept / total:.2f}%) in "
        f"{plural(len(selection.shards), 'shard')}, scanned in {seconds:.2f} s"
    )
    return 0


def _default_manifest(paths: Sequence[str], suffix: str) -> str:
    """``<folder>/<the shards' common name prefix>.manifest.json``."""
    import os

    folders = {path.rsplit("/", 1)[0] if "://" in path else os.path.dirname(path) for path in paths}
    if len(folders) != 1:
        raise ValueError("the shards lie in several folders: give --out")
    import re

    names = [path.rsplit("/", 1)[-1] for path in paths]
    prefixes = {re.sub(r"-\d+-of-\d+.*$", "", name) for name in names}  # train-00000-of-00003 ...
    common = os.path.commonprefix(names)  # noqa: RUF071 (a prefix of names, character by character)
    stem = prefixes.pop() if len(prefixes) == 1 else common.rstrip("0123456789-_.") or "dataset"
    folder = folders.pop()
    return f"{folder}/{stem}{suffix}" if "://" in folder else os.path.join(folder, stem + suffix)


def _stats_row(payload: np.ndarray[Any, Any], framed_bytes: int, label: str) -> str:
    if len(payload) == 0:
        return f"{0:>12,} {framed_bytes:>14,} {'-':>9} {'-':>11} {'-':>11}  {label}"
    return (
        f"{len(payload):>12,} {framed_bytes:>14,} {int(payload.min()):>9,} "
        f"{float(payload.mean()):>11,.1f} {int(payload.max()):>11,}  {label}"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-index",
        description="Build and check index files for TFRecord files: `<offset> <framed_size>` per\n"
        "record, the format of DALI's tfrecord2idx and the tfrecord package; for GZIP / ZLIB\n"
        "files a compressed index (<file>.cidx: record positions and decompressor seek points).",
        epilog="example:\n  tfrecord-index build 'data/train-*.tfrecord' --jobs 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    build = add_command(
        commands,
        "build",
        "write the index of every file that has no fresh one (missing or stale), in parallel",
        "tfrecord-index build 'data/train-*.tfrecord' --jobs 8\n"
        "tfrecord-index build s3://bucket/train/ --out-dir /indexes/train\n"
        "tfrecord-index build damaged.tfrecord --on-error skip",
    )
    build.add_argument("paths", nargs="+", help="data files, globs, directories or URLs (s3://...)")
    build.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        help="worker processes (default: the CPUs; none start when one file or none needs an index)",
    )
    build.add_argument("--force", action="store_true", help="rebuild indexes that are already fresh")
    build.add_argument("--verify-crc", action="store_true", help="also check every payload's CRC")
    build.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="raise: a damaged file fails (default); skip: index its intact records and list the "
        "damaged regions left out (exit status 1)",
    )
    build.add_argument("--out-dir", help="write indexes here (a directory or URL) instead of beside the data")
    build.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_storage_options(build)
    build.set_defaults(run=_cmd_build)

    check = add_command(
        commands,
        "check",
        "report missing, stale or unreadable indexes; exit 1 if there is any",
        "tfrecord-index check data/ --quiet",
    )
    check.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    check.add_argument("--index-dir", help="look for indexes here instead of beside the data")
    check.add_argument("--quiet", "-q", action="store_true", help="list only the bad ones")
    add_storage_options(check)
    check.set_defaults(run=_cmd_check)

    stats = add_command(
        commands,
        "stats",
        "records and payload sizes per file and in total, read from the indexes",
        "tfrecord-index stats 'data/train-*.tfrecord'",
    )
    stats.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    stats.add_argument("--index-dir", help="look for indexes here instead of beside the data")
    add_storage_options(stats)
    stats.set_defaults(run=_cmd_stats)

    manifest = add_command(
        commands,
        "manifest",
        "write the dataset's manifest: one file from which a reader starts with O(1) requests",
        "tfrecord-index manifest 'gs://bucket/train-*.tfrecord'\n"
        "tfrecord-index manifest data/train/ --out data/train/train.manifest.json",
    )
    manifest.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    manifest.add_argument(
        "--out", help="where to write it (default: <folder>/<the shards' common prefix>.manifest.json)"
    )
    add_storage_options(manifest)
    manifest.set_defaults(run=_cmd_manifest)

    chosen = add_command(
        commands,
        "select",
        "scan the records once and write the selection of those a filter passes (a .ttsel file a "
        "dataset reads with select=)",
        "tfrecord-index select 'data/train-*.tfrecord' --where 'label == 3' --out label3.ttsel\n"
        "tfrecord-index select s3://bucket/train/ --where 'image/height >= 256 and text ~ dog' "
        "--out big-dogs.ttsel --jobs 8\n"
        "tfrecord-index select data/ --where 'label in [1, 7] or not text ~ \"cat or dog\"' --out some.ttsel",
    )
    chosen.add_argument("paths", nargs="+", help="data files, globs, directories, URLs or a manifest")
    chosen.add_argument(
        "--where",
        required=True,
        help="the filter, in the viewer's language: KEY OP VALUE clauses (OP: == != < <= > >=, or ~ "
        "for contains) and KEY in [A, B, ...], combined with not, and, or (binding in that order) and "
        "parentheses; quote a value that holds those words or brackets ('cat or dog'); a list "
        "feature passes when any of its values does, a record without the feature no comparison",
    )
    chosen.add_argument("--out", required=True, help="the selection file to write (.ttsel), a path or URL")
    chosen.add_argument(
        "--jobs", "-j", type=int, default=1, help="processes that scan shards at once (default: 1)"
    )
    chosen.add_argument(
        "--type",
        action="append",
        metavar="KEY=KIND",
        help="the type (int, float or bytes) of a feature that few records set (the others are "
        "read from the first 1,000 records); may be repeated",
    )
    chosen.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_storage_options(chosen)
    chosen.set_defaults(run=_cmd_select)
    add_debug_option(parser, build, check, stats, manifest, chosen)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except (TFRecordError, ValueError, ImportError, WorkerDiedError) as error:
        if args.debug:
            raise
        print(f"tfrecord-index: error: {error}", file=sys.stderr)
        return 2
    return status
