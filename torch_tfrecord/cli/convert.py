"""``torch-tfrecord convert``: labeled data (image folders, COCO, Pascal VOC, CSV) to TFRecord, and
TFRecord to Parquet and back."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ..support.text import plural
from .options import add_command, add_storage_options, storage_options

__all__ = ["add_convert_command", "is_conversion_error"]


def add_convert_command(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds ``convert`` and its formats to ``commands``; returns their parsers."""
    convert = add_command(
        commands,
        "convert",
        "convert labeled data (image folder, COCO, Pascal VOC, CSV, Parquet) to sharded, indexed TFRecord, "
        "or TFRecord to Parquet",
        "torch-tfrecord convert coco instances.json images/ --out out/ --split train=0.9,val=0.1\n"
        "torch-tfrecord convert parquet 'data/train-*.tfrecord' --out train.parquet",
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
        add_image_options(command)
    for command in (folder, coco, voc, segmentation, table):
        add_write_options(command, images=command is not table)
        command.set_defaults(run=cmd_convert)
    return [convert, folder, coco, voc, segmentation, table, *_add_parquet_commands(formats)]


def _add_parquet_commands(formats: Any) -> list[argparse.ArgumentParser]:
    to_parquet = add_command(
        formats,
        "parquet",
        "TFRecord files to Parquet (one row per record), for DuckDB, pandas, Polars or the Hugging Face Hub",
        "torch-tfrecord convert parquet 'data/train-*.tfrecord' --out train.parquet\n"
        "torch-tfrecord convert parquet data/ --out parquet/ --rows-per-file 100000 --spec data/spec.json",
    )
    to_parquet.add_argument("sources", nargs="+", help="TFRecord files, globs or directories")
    to_parquet.add_argument(
        "--out",
        required=True,
        help="the Parquet file (with --rows-per-file: a directory of part-NNNNN.parquet)",
    )
    to_parquet.add_argument("--rows-per-file", type=int, help="start a new file after this many rows")
    to_parquet.add_argument(
        "--spec",
        help="a spec.json (as tt.write_dataset and convert from-parquet save it; default: the spec.json "
        "beside the sources, else the spec inferred from the records)",
    )
    to_parquet.add_argument(
        "--batch-size", type=int, default=1024, help="records per row group, the memory held (default: 1024)"
    )
    to_parquet.add_argument(
        "--compression",
        default="zstd",
        help="the Parquet codec: zstd, snappy, gzip, none ... (default: zstd)",
    )
    from_parquet = add_command(
        formats,
        "from-parquet",
        "Parquet files to TFRecord Examples, one per row (files written by 'convert parquet' give back "
        "the same Examples); the spec is saved as spec.json beside the shards",
        "torch-tfrecord convert from-parquet train.parquet --out shards/ --shard-size 10000",
    )
    from_parquet.add_argument("parquet", nargs="+", help="Parquet files, globs or directories")
    from_parquet.add_argument("--out", required=True, help="output directory (or URL prefix)")
    from_parquet.add_argument("--name", default="data", help="shard name prefix (default: data)")
    from_parquet.add_argument("--shard-size", type=int, help="records per shard (default: 1024)")
    from_parquet.add_argument(
        "--compression", choices=("gzip", "zlib"), help="compress the shards (default: not compressed)"
    )
    for command in (to_parquet, from_parquet):
        command.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
        add_storage_options(command)
        command.set_defaults(run=cmd_parquet)
    return [to_parquet, from_parquet]


def is_conversion_error(error: Exception) -> bool:
    """A failed conversion (exit status 1): input that cannot be converted, or damaged or
    ill-fitting records met on the way."""
    from ..convert import ConversionError  # imports torch: only a conversion gets here
    from ..errors import CorruptRecordError, FeatureError

    return isinstance(error, ConversionError | CorruptRecordError | FeatureError)


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


def cmd_convert(args: argparse.Namespace) -> int:
    from .. import convert

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


def cmd_parquet(args: argparse.Namespace) -> int:
    """``convert parquet`` and ``convert from-parquet``."""
    from ..convert.parquet import from_parquet, to_parquet

    common = {
        "compression": args.compression,
        "progress": not args.quiet and sys.stderr.isatty(),
        "storage_options": storage_options(args),
    }
    start = time.perf_counter()
    if args.format == "from-parquet":
        result = from_parquet(args.parquet, args.out, shard_size=args.shard_size, name=args.name, **common)
        paths = result.shards[""]
        more = f" ({paths[0]}{' ...' if len(paths) > 1 else ''})" if paths else ""
        print(f"{plural(result.total, 'record')} in {plural(len(paths), 'shard')}{more}")
        print(f"spec: {result.spec_path}")
        print(f"written in {time.perf_counter() - start:.2f} s")
        return 0
    specs: dict[str, Any] = {}
    if args.spec:
        from ..codec.spec_file import decode_spec_json
        from ..errors import SpecError

        with open(args.spec, encoding="utf-8") as file:
            found = decode_spec_json(file.read(), source=args.spec)
        if found is None:
            raise SpecError(
                f'{args.spec}: not a torch-tfrecord spec file (no "format": "torch-tfrecord-spec")'
            )
        specs = found
    files = to_parquet(
        args.sources,
        args.out,
        **specs,
        rows_per_file=args.rows_per_file,
        batch_size=args.batch_size,
        **common,
    )
    rows = sum(_parquet_rows(path) for path in files)
    more = " ..." if len(files) > 1 else ""
    print(f"{plural(rows, 'row')} in {plural(len(files), 'Parquet file')} ({files[0]}{more})")
    print(f"written in {time.perf_counter() - start:.2f} s")
    return 0


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq  # to_parquet has imported it

    return int(pq.ParquetFile(path).metadata.num_rows)


def add_write_options(parser: argparse.ArgumentParser, images: bool) -> None:
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


def add_image_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label-map", help="label_map.pbtxt fixing the class ids (default: classes sorted)")
    parser.add_argument(
        "--reencode",
        action="store_true",
        help="decode, apply EXIF orientation and encode again (default: bytes as they are)",
    )
