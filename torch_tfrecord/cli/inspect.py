"""The commands that look inside files: ``head``, ``schema``, ``count``, ``verify``, ``preview``."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import TFRecordError
from ..support.text import plural
from .options import add_command, add_storage_options, storage_options

if TYPE_CHECKING:
    from ..codec.survey import Survey

# Each command imports what it reads with inside it: building the parser imports none of it, so
# every command (`torch-tfrecord view` first) starts without numpy, protobuf or fsspec loaded
# for the others.

__all__ = ["add_inspect_commands"]


def add_inspect_commands(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds the commands that look inside files to ``commands``; returns their parsers."""
    head = add_command(
        commands,
        "head",
        "print the first records, feature by feature (a SequenceExample's feature lists step by step)",
        "torch-tfrecord head train.tfrecord -n 2 --json",
    )
    head.add_argument("path", help="a file, glob, directory or URL")
    head.add_argument("-n", type=int, default=5, help="records to show (default: 5)")
    head.add_argument("--json", action="store_true", help="one JSON object per line, bytes in base64")
    head.set_defaults(run=cmd_head)

    schema = add_command(
        commands,
        "schema",
        "propose a feature spec from the records, as a table and as Python (SequenceExamples: the context "
        "and sequence specs; a TFDS directory: its features)",
        "torch-tfrecord schema 'data/train-*.tfrecord'",
    )
    schema.add_argument("paths", nargs="+", help="files, globs, directories or URLs")
    schema.add_argument("--records", type=int, default=1000, help="records to look at (default: 1000)")
    schema.set_defaults(run=cmd_schema)

    count = add_command(
        commands,
        "count",
        "records per file (from a fresh index when there is one)",
        "torch-tfrecord count data/",
    )
    count.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    count.set_defaults(run=cmd_count)

    verify = add_command(
        commands,
        "verify",
        "check every record's CRCs and the index; list the offset of each bad record; exit 1 on damage",
        "torch-tfrecord verify 'data/*.tfrecord'",
    )
    verify.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    verify.add_argument("--quiet", "-q", action="store_true", help="list only damaged files")
    verify.set_defaults(run=cmd_verify)

    preview = add_command(
        commands,
        "preview",
        "a grid of the first images with their labels (boxes and class names for detection data)",
        "torch-tfrecord preview data/train-00000-of-00004.tfrecord --out grid.png -n 16",
    )
    preview.add_argument("path", help="a file, glob, directory or URL")
    preview.add_argument("--out", required=True, help="the PNG to write")
    preview.add_argument("-n", type=int, default=16, help="images (default: 16)")
    preview.add_argument("--cell", type=int, default=256, help="pixels per image (default: 256)")
    preview.set_defaults(run=cmd_preview)

    for command in (head, schema, count, verify, preview):
        add_storage_options(command)
    return [head, schema, count, verify, preview]


def _disagreement(path: str, records: int, expected: dict[str, int]) -> str | None:
    if path in expected and records != expected[path]:
        return f"holds {records:,} records, but dataset_info.json says {expected[path]:,}"
    return None


def cmd_count(args: argparse.Namespace) -> int:
    from ..integrations.tfds.info import expand_with_tfds
    from ..records.index import count_records

    total = 0
    failed = 0
    options = storage_options(args)
    files, expected = expand_with_tfds(args.paths, options)
    for path in files:
        try:
            records = count_records(path, storage_options=options)
        except TFRecordError as error:
            print(f"{'ERROR':>12}  {path}: {error}")
            failed += 1
            continue
        total += records
        problem = _disagreement(path, records, expected)
        if problem:
            print(f"{'ERROR':>12}  {path}: {problem}")
            failed += 1
            continue
        print(f"{records:>12,}  {path}")
    print(f"{total:>12,}  total")
    return 1 if failed else 0


def _verify_one(path: str, options: dict[str, Any] | None, expected: dict[str, int]) -> tuple[list[str], str]:
    """Checks every record's CRCs and the index, if any (and the record count a TFDS
    ``dataset_info.json`` gives): each problem found (none: the file is good), and a line that
    sums up the damage (empty when there is none).

    One pass: past damage, the read resumes at the next intact record, so every damaged region
    is listed with its byte offsets (and the records lost, where the headers say).
    """
    from ..records.index import default_index_path, load_index
    from ..records.io import exists, resolve_compression
    from ..records.reader import ReadStats, read_records

    compression = resolve_compression("auto", path, options)
    stats = ReadStats()
    records = 0
    for _ in read_records(
        path, compression=compression, on_error="skip", stats=stats, storage_options=options
    ):
        records += 1
    disagreement = None if stats.errors else _disagreement(path, records, expected)
    problems = list(stats.errors) + ([disagreement] if disagreement else [])
    summary = stats.damage_summary()
    index_path = default_index_path(path)
    if compression is None and exists(index_path, options):
        try:
            load_index(index_path, data_path=path, storage_options=options)
        except TFRecordError as error:
            problems.append(f"{type(error).__name__}: {error}")
    return problems, summary


def cmd_verify(args: argparse.Namespace) -> int:
    from ..integrations.tfds.info import expand_with_tfds

    logging.getLogger("torch_tfrecord.records.reader").setLevel(logging.ERROR)  # each problem is listed below
    start = time.perf_counter()
    options = storage_options(args)
    paths, expected = expand_with_tfds(args.paths, options)
    failed = 0
    for path in paths:
        try:
            problems, summary = _verify_one(path, options, expected)
        except TFRecordError as error:
            problems, summary = [f"{type(error).__name__}: {error}"], ""
        if problems:
            failed += 1
            print(f"BAD  {path}: {plural(len(problems), 'problem')}")
            for problem in problems:
                print(f"       {problem}")
            if summary:
                print(f"       {summary}")
        elif not args.quiet:
            print(f"OK   {path}")
    seconds = time.perf_counter() - start
    print(f"{len(paths) - failed:,} of {plural(len(paths), 'file')} OK ({seconds:.2f} s)")
    return 1 if failed else 0


def cmd_head(args: argparse.Namespace) -> int:
    from ..codec.inspect import format_json, format_text
    from ..records.listing import expand_sources
    from ..records.reader import read_records

    options = storage_options(args)
    shown = 0
    for path in expand_sources(args.path, options):
        for number, payload in enumerate(read_records(path, storage_options=options)):
            if shown >= args.n:
                return 0
            where = f"{path}#{number}"
            print(format_json(shown, payload, where) if args.json else format_text(shown, payload, where))
            shown += 1
    return 0


def _tfds_schema(path: str, options: dict[str, Any] | None) -> int:
    from ..integrations.tfds.decoder import FeatureDecoder  # imports torch
    from ..integrations.tfds.info import read_info
    from ..integrations.tfds.load import load_features

    info = read_info(path, options)
    print(f"{info.name} {info.version}: {info.path}")
    for name, split in info.splits.items():
        shards = plural(len(split.shard_lengths), "shard")
        print(f"  split {name}: {plural(split.num_examples, 'record')} in {shards}")
    features = load_features(info, options)
    print()
    _print_table(("feature", "connector", "spec"), FeatureDecoder(features, batched=False).rows())
    print("\n# read it with:\nimport torch_tfrecord as tt\n")
    print(f"ds = tt.from_tfds({info.path!r}, split='train')")
    return 0


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def cmd_schema(args: argparse.Namespace) -> int:
    from ..codec.inspect import show_key
    from ..codec.survey import survey_paths
    from ..integrations.tfds.info import is_tfds_dir

    # The proposals are found and printed as code without torch: the command starts fast.
    options = storage_options(args)
    if len(args.paths) == 1 and is_tfds_dir(args.paths[0], options):
        return _tfds_schema(args.paths[0], options)
    schema_logger = logging.getLogger("torch_tfrecord.codec.schema")
    level = schema_logger.level
    schema_logger.setLevel(logging.ERROR)  # its warnings are printed below, on stdout
    try:
        survey = survey_paths(args.paths, max_records=args.records, storage_options=options)
    finally:
        schema_logger.setLevel(level)
    for warning in survey.warnings:
        print(f"warning: {warning}\n")
    if survey.feature_lists is not None:
        _print_sequence_schema(survey, args.paths)
        return 0
    header = ("feature", "spec", "detail", "note")
    rows = [
        (show_key(key), proposal.kind, proposal.arguments(), proposal.note)
        for key, proposal in survey.proposals.items()
    ]
    _print_table(header, rows)
    if survey.warnings:
        print("\n(no spec to paste: these records do not look like Examples)")
        return 0
    print("\n# paste into your code:\nimport torch\nimport torch_tfrecord as tt\n\nspec = " + survey.code())
    return 0


def _print_sequence_schema(survey: Survey, paths: Sequence[str]) -> None:
    from ..codec.inspect import show_key

    lists = survey.feature_lists or {}
    print(
        f"SequenceExamples ({plural(survey.records, 'record')} read): "
        f"{plural(len(survey.proposals), 'context feature')}, {plural(len(lists), 'feature list')}\n"
    )
    context_rows = [
        (show_key(key), proposal.kind, proposal.arguments(), proposal.note)
        for key, proposal in survey.proposals.items()
    ]
    if context_rows:
        _print_table(("context feature", "spec", "detail", "note"), context_rows)
        print()
    steps = {key: f"{low}-{high}" if low != high else str(low) for key, (low, high) in survey.steps.items()}
    list_rows = [
        (show_key(key), steps[key], proposal.kind, proposal.arguments(), proposal.note)
        for key, proposal in lists.items()
    ]
    _print_table(("feature list", "steps", "spec", "detail", "note"), list_rows)
    if survey.warnings:
        print("\n(no spec to paste: these records do not look like SequenceExamples)")
        return
    source = paths[0] if len(paths) == 1 else list(paths)
    print(
        "\n# paste into your code:\nimport torch\nimport torch_tfrecord as tt\n\n"
        f"context_spec = {survey.code()}\nsequence_spec = {survey.sequence_code()}\n\n"
        "# with batch_size=, each FixedLenSequence is padded to the longest in the batch;\n"
        "# '_lengths' holds each feature list's steps\n"
        f"ds = tt.TFRecordDataset({source!r}, context_spec=context_spec, sequence_spec=sequence_spec)"
    )


def cmd_preview(args: argparse.Namespace) -> int:
    from ..codec.label_map import class_names_beside
    from ..records.listing import expand_sources
    from ..records.reader import read_records
    from ..vision.preview import render_grid

    options = storage_options(args)
    records: list[bytes] = []
    locations: list[str] = []
    for path in expand_sources(args.path, options):
        for number, payload in enumerate(read_records(path, storage_options=options)):
            records.append(payload)
            locations.append(f"record {number} of {path!r}")
            if len(records) >= args.n:
                break
        if len(records) >= args.n:
            break
    names = class_names_beside(args.path)
    sheet = render_grid(records, locations=locations, cell=args.cell, class_names=names)
    sheet.save(args.out)
    print(f"{args.out}: {plural(len(records), 'record')}, {sheet.width}x{sheet.height} pixels")
    return 0
