"""`torch-tfrecord`: look inside TFRecord files.

torch-tfrecord count data/train-*.tfrecord
torch-tfrecord verify data/
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from ._cli import add_storage_options, storage_options
from .errors import TFRecordError
from .index import count_records, default_index_path, load_index
from .io import exists, expand_sources, resolve_compression
from .reader import ReadStats, read_records

__all__ = ["main"]


def _cmd_count(args: argparse.Namespace) -> int:
    total = 0
    failed = 0
    options = storage_options(args)
    for path in expand_sources(args.paths, options):
        try:
            records = count_records(path, storage_options=options)
        except TFRecordError as error:
            print(f"{'ERROR':>12}  {path}: {error}")
            failed += 1
            continue
        total += records
        print(f"{records:>12,}  {path}")
    print(f"{total:>12,}  total")
    return 1 if failed else 0


def _verify_one(path: str, options: dict[str, Any] | None) -> str | None:
    """Reads every record with CRC checks and compares the index, if any: the problem, or None."""
    stats = ReadStats()
    for _ in read_records(path, verify_crc=True, stats=stats, storage_options=options):
        pass
    index_path = default_index_path(path)
    if exists(index_path, options) and resolve_compression("auto", path, options) is None:
        table = load_index(index_path, data_path=path, storage_options=options)
        if len(table) != stats.records:
            return f"index {index_path!r} lists {len(table)} records, the file holds {stats.records}"
    return None


def _cmd_verify(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    options = storage_options(args)
    paths = expand_sources(args.paths, options)
    failed = 0
    for path in paths:
        try:
            problem = _verify_one(path, options)
        except TFRecordError as error:
            problem = f"{type(error).__name__}: {error}"
        if problem is not None:
            failed += 1
            print(f"BAD  {path}: {problem}")
        elif not args.quiet:
            print(f"OK   {path}")
    seconds = time.perf_counter() - start
    print(f"{len(paths) - failed} of {len(paths)} files OK ({seconds:.2f} s)")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torch-tfrecord", description="Look inside TFRecord files.")
    commands = parser.add_subparsers(dest="command", required=True)

    count = commands.add_parser("count", help="records per file (from a fresh index when there is one)")
    count.add_argument("paths", nargs="+", help="data files, globs or directories")
    add_storage_options(count)
    count.set_defaults(run=_cmd_count)

    verify = commands.add_parser(
        "verify", help="check every record's CRCs and the index; exit 1 if anything is damaged"
    )
    verify.add_argument("paths", nargs="+", help="data files, globs or directories")
    verify.add_argument("--quiet", "-q", action="store_true", help="list only damaged files")
    add_storage_options(verify)
    verify.set_defaults(run=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except (TFRecordError, ImportError) as error:
        print(f"torch-tfrecord: error: {error}", file=sys.stderr)
        return 2
    return status
