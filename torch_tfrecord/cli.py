"""`torch-tfrecord`: look inside TFRecord files, check them, convert labeled data to them.

torch-tfrecord head data/train-00000-of-00008.tfrecord -n 3 [--json]
torch-tfrecord schema 'data/train-*.tfrecord'
torch-tfrecord schema ~/tensorflow_datasets/mnist/3.0.1
torch-tfrecord count data/train-*.tfrecord
torch-tfrecord verify data/
torch-tfrecord preview data/train-00000-of-00008.tfrecord --out grid.png
torch-tfrecord convert coco instances.json images/ --out out/ --split train=0.9,val=0.1

Errors are one line (``torch-tfrecord: error: ...``); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ._cli import add_command, add_debug_option, add_storage_options, plural, storage_options
from ._proposal import Survey, survey_paths
from .errors import TFRecordError
from .index import count_records, default_index_path, load_index
from .inspect import format_json, format_text, show_key
from .io import exists, expand_sources, resolve_compression
from .reader import ReadStats, read_records
from .tfds.info import is_tfds_dir, read_info

__all__ = ["main"]


def _expand(paths: Sequence[str], options: dict[str, Any] | None) -> tuple[list[str], dict[str, int]]:
    """The data files of ``paths``; a TFDS version directory stands for its shards, split by
    split, and the records ``dataset_info.json`` says each holds are returned beside them."""
    files: list[str] = []
    expected: dict[str, int] = {}
    for path in paths:
        if not is_tfds_dir(path, options):
            files.extend(expand_sources(path, options))
            continue
        info = read_info(path, options)
        for name, split in info.splits.items():
            shards = info.shard_paths(name)
            files.extend(shards)
            expected.update(zip(shards, split.shard_lengths, strict=True))
    return files, expected


def _disagreement(path: str, records: int, expected: dict[str, int]) -> str | None:
    if path in expected and records != expected[path]:
        return f"holds {records:,} records, but dataset_info.json says {expected[path]:,}"
    return None


def _cmd_count(args: argparse.Namespace) -> int:
    total = 0
    failed = 0
    options = storage_options(args)
    files, expected = _expand(args.paths, options)
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
    compression = resolve_compression("auto", path, options)
    stats = ReadStats()
    records = 0
    for _ in read_records(
        path, compression=compression, on_error="skip", stats=stats, storage_options=options
    ):
        records += 1
    disagreement = None if stats.errors else _disagreement(path, records, expected)
    problems = list(stats.errors) + ([disagreement] if disagreement else [])
    summary = ""
    if stats.damaged:
        lost = sum(region.records or 0 for region in stats.damaged)
        unknown = any(region.records is None for region in stats.damaged)
        summary = (
            f"{plural(len(stats.damaged), 'damaged region')}: {plural(stats.bytes_skipped, 'byte')} "
            f"and {'at least ' if unknown else ''}{plural(lost, 'record')} lost, "
            f"{plural(stats.records, 'intact record')} read"
        )
    index_path = default_index_path(path)
    if compression is None and exists(index_path, options):
        try:
            load_index(index_path, data_path=path, storage_options=options)
        except TFRecordError as error:
            problems.append(f"{type(error).__name__}: {error}")
    return problems, summary


def _cmd_verify(args: argparse.Namespace) -> int:
    logging.getLogger("torch_tfrecord.reader").setLevel(logging.ERROR)  # each problem is listed below
    start = time.perf_counter()
    options = storage_options(args)
    paths, expected = _expand(args.paths, options)
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


def _cmd_head(args: argparse.Namespace) -> int:
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


def _cmd_tfds_schema(path: str, options: dict[str, Any] | None) -> int:
    from .tfds.features import FeatureDecoder  # imports torch
    from .tfds.load import load_features

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


def _cmd_schema(args: argparse.Namespace) -> int:
    # The proposals are found and printed as code without torch: the command starts fast.
    options = storage_options(args)
    if len(args.paths) == 1 and is_tfds_dir(args.paths[0], options):
        return _cmd_tfds_schema(args.paths[0], options)
    schema_logger = logging.getLogger("torch_tfrecord.schema")
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


def _class_names(path: str) -> dict[int, str] | None:
    """The names of the label map the converters write beside their shards, if ``path`` has one
    (read without the converters, which import torch)."""
    from .label_map import LabelMap

    folder = path if os.path.isdir(path) else os.path.dirname(path)
    candidate = os.path.join(folder, "label_map.pbtxt")
    if not os.path.isfile(candidate):
        return None
    with open(candidate, encoding="utf-8-sig") as f:
        return dict(LabelMap.decode(f.read(), source=candidate).names)


def _cmd_preview(args: argparse.Namespace) -> int:
    from .preview import render_grid

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
    sheet = render_grid(records, locations=locations, cell=args.cell, class_names=_class_names(args.path))
    sheet.save(args.out)
    print(f"{args.out}: {plural(len(records), 'record')}, {sheet.width}x{sheet.height} pixels")
    return 0


def _split(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, ratio = part.partition("=")
        try:
            out[name.strip()] = float(ratio)
        except ValueError:
            raise ValueError(f"--split {text!r}: write it as train=0.8,val=0.2") from None
        if not sep or not name.strip():
            raise ValueError(f"--split {text!r}: write it as train=0.8,val=0.2")
    return out


def _cmd_convert(args: argparse.Namespace) -> int:
    from . import convert

    if args.jobs is None:
        # Processes pay off where each record costs CPU (decoding and encoding images again):
        # benchmarks/bench_convert.py, 20,000 JPEGs on 2 cores: --reencode 10.9 s with 1 job,
        # 8.2 s with 2; header only 1.1 s with 1 job, 3.2 s with 2 (starting and feeding them).
        args.jobs = (os.cpu_count() or 1) if getattr(args, "reencode", False) else 1
    write = {
        "name": args.name,
        "shards": args.shards,
        "max_records_per_shard": args.max_records_per_shard,
        "split": _split(args.split),
        "seed": args.seed,
        "jobs": args.jobs,
        "on_error": args.on_error,
        "progress": not args.quiet and sys.stderr.isatty(),
    }
    start = time.perf_counter()
    if args.format == "image-folder":
        result = convert.convert_image_folder(
            args.root, args.out, label_map=args.label_map, reencode=args.reencode, **write
        )
    elif args.format == "coco":
        result = convert.convert_coco(
            args.annotations,
            args.images,
            args.out,
            label_map=args.label_map,
            drop_empty=args.drop_empty,
            segmentation=args.segmentation,
            masks=args.masks,
            reencode=args.reencode,
            **write,
        )
    elif args.format == "voc":
        result = convert.convert_voc(
            args.voc,
            args.out,
            args.images,
            label_map=args.label_map,
            drop_empty=args.drop_empty,
            reencode=args.reencode,
            **write,
        )
    elif args.format == "voc-segmentation":
        result = convert.convert_voc_segmentation(
            args.voc,
            args.out,
            image_set=args.image_set,
            objects=args.objects,
            label_map=args.label_map,
            reencode=args.reencode,
            **write,
        )
    else:
        types = convert.parse_types(args.spec) if args.spec else None
        result = convert.convert_csv(args.csv, args.out, types=types, delimiter=args.delimiter, **write)
    seconds = time.perf_counter() - start
    for split, paths in result.shards.items():
        label = split or "records"
        records, shards = plural(result.records[split], "record"), plural(len(paths), "shard")
        print(f"{label}: {records} in {shards} ({paths[0]}{' ...' if len(paths) > 1 else ''})")
    if result.label_map:
        print(f"label map: {result.label_map}")
    if result.skipped:
        print(f"skipped {plural(len(result.skipped), 'bad input')}:")
        for message in result.skipped[:20]:
            print(f"  {message}")
        if len(result.skipped) > 20:
            print(f"  ... and {len(result.skipped) - 20} more")
    print(f"{plural(result.total, 'record')} written in {seconds:.2f} s")
    return 0


def _add_write_options(parser: argparse.ArgumentParser, images: bool) -> None:
    parser.add_argument("--out", required=True, help="output directory (or URL prefix)")
    parser.add_argument("--name", default="data", help="shard name prefix (default: data)")
    sharding = parser.add_mutually_exclusive_group()
    sharding.add_argument("--shards", type=int, help="shards per split")
    sharding.add_argument(
        "--max-records-per-shard",
        type=int,
        help="records per shard (default: 1024 when --shards is not given)",
    )
    parser.add_argument("--split", help="ratios of a shuffled split, e.g. train=0.8,val=0.1,test=0.1")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default: 0)")
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        help=(
            "encoding processes (default: the number of CPUs with --reencode, else 1, which is "
            "faster when images are stored as they are)"
            if images
            else "encoding processes (default: 1)"
        ),
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="raise: stop at the first bad input, writing nothing (default); skip: leave it out and count it",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def _add_image_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label-map", help="label_map.pbtxt fixing the class ids (default: classes sorted)")
    parser.add_argument(
        "--reencode",
        action="store_true",
        help="decode, apply EXIF orientation and encode again (default: bytes as they are)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-tfrecord",
        description="Look inside TFRecord files, check them, and convert labeled data to them.",
        epilog="example:\n  torch-tfrecord head data/train-00000-of-00008.tfrecord -n 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    head = add_command(
        commands,
        "head",
        "print the first records, feature by feature (a SequenceExample's feature lists step by step)",
        "torch-tfrecord head train.tfrecord -n 2 --json",
    )
    head.add_argument("path", help="a file, glob, directory or URL")
    head.add_argument("-n", type=int, default=5, help="records to show (default: 5)")
    head.add_argument("--json", action="store_true", help="one JSON object per line, bytes in base64")
    head.set_defaults(run=_cmd_head)

    schema = add_command(
        commands,
        "schema",
        "propose a feature spec from the records, as a table and as Python (SequenceExamples: the context "
        "and sequence specs; a TFDS directory: its features)",
        "torch-tfrecord schema 'data/train-*.tfrecord'",
    )
    schema.add_argument("paths", nargs="+", help="files, globs, directories or URLs")
    schema.add_argument("--records", type=int, default=1000, help="records to look at (default: 1000)")
    schema.set_defaults(run=_cmd_schema)

    count = add_command(
        commands,
        "count",
        "records per file (from a fresh index when there is one)",
        "torch-tfrecord count data/",
    )
    count.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    count.set_defaults(run=_cmd_count)

    verify = add_command(
        commands,
        "verify",
        "check every record's CRCs and the index; list the offset of each bad record; exit 1 on damage",
        "torch-tfrecord verify 'data/*.tfrecord'",
    )
    verify.add_argument("paths", nargs="+", help="data files, globs, directories or URLs")
    verify.add_argument("--quiet", "-q", action="store_true", help="list only damaged files")
    verify.set_defaults(run=_cmd_verify)

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
    preview.set_defaults(run=_cmd_preview)

    for command in (head, schema, count, verify, preview):
        add_storage_options(command)

    convert = add_command(
        commands,
        "convert",
        "convert labeled data (image folder, COCO, Pascal VOC, CSV) to sharded, indexed TFRecord",
        "torch-tfrecord convert coco instances.json images/ --out out/ --split train=0.9,val=0.1",
    )
    formats = convert.add_subparsers(dest="format", required=True)
    folder = add_command(
        formats,
        "image-folder",
        "ROOT/<class>/<image> to image/encoded + image/class/label",
        "torch-tfrecord convert image-folder photos/ --out out/ --shards 8",
    )
    folder.add_argument("root", help="the folder of class folders (ROOT/<class>/<image>)")
    coco = add_command(
        formats,
        "coco",
        "COCO detection JSON to the Object Detection API layout",
        "torch-tfrecord convert coco instances_val2017.json val2017/ --out out/ --split train=0.9,val=0.1",
    )
    coco.add_argument("annotations", help="the COCO instances JSON file")
    coco.add_argument("images", help="the folder its file_name entries are relative to")
    coco.add_argument("--drop-empty", action="store_true", help="leave out images without annotations")
    coco.add_argument("--segmentation", action="store_true", help="also store the polygons")
    coco.add_argument(
        "--masks",
        action="store_true",
        help="also store each object's instance mask as a PNG (image/object/mask; needs pycocotools)",
    )
    voc = add_command(
        formats,
        "voc",
        "Pascal VOC XML to the Object Detection API layout (plus difficult / truncated)",
        "torch-tfrecord convert voc VOCdevkit/VOC2012 --out out/",
    )
    voc.add_argument("voc", help="a VOC root (Annotations/, JPEGImages/) or a folder of XML files")
    voc.add_argument("images", nargs="?", help="the images (default: VOC/JPEGImages)")
    voc.add_argument("--drop-empty", action="store_true", help="leave out images without objects")
    segmentation = add_command(
        formats,
        "voc-segmentation",
        "Pascal VOC segmentation masks (SegmentationClass/ palette PNGs) with their images",
        "torch-tfrecord convert voc-segmentation VOCdevkit/VOC2012 --image-set train --out out/",
    )
    segmentation.add_argument("voc", help="a VOC root (JPEGImages/, SegmentationClass/)")
    segmentation.add_argument(
        "--image-set", help="convert the ids of ImageSets/Segmentation/NAME.txt (default: every mask)"
    )
    segmentation.add_argument(
        "--objects", action="store_true", help="also store the instance masks of SegmentationObject/"
    )
    table = add_command(
        formats,
        "csv",
        "one Example per CSV row, column types inferred or given",
        "torch-tfrecord convert csv rows.csv --out out/ --spec 'age:int,score:float'",
    )
    table.add_argument("csv", help="the CSV file; its first line names the columns")
    table.add_argument("--spec", help="column types, e.g. age:int,score:float,name:bytes (others inferred)")
    table.add_argument(
        "--delimiter", default=",", help="the character between fields, e.g. ';' or $'\\t' (default: ,)"
    )
    for command in (folder, coco, voc, segmentation):
        _add_image_options(command)
    for command in (folder, coco, voc, segmentation, table):
        _add_write_options(command, images=command is not table)
        command.set_defaults(run=_cmd_convert)
    add_debug_option(
        parser, head, schema, count, verify, preview, convert, folder, coco, voc, segmentation, table
    )
    return parser


def _is_conversion_error(error: Exception) -> bool:
    from .convert import ConversionError  # imports torch: only a conversion gets here

    return isinstance(error, ConversionError)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (1: damage or a failed conversion,
    2: an error that stopped the command)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    try:
        status: int = args.run(args)
    except Exception as error:
        if args.debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"torch-tfrecord: error: {message}", file=sys.stderr)
        return 1 if args.command == "convert" and _is_conversion_error(error) else 2
    return status
