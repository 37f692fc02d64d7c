"""`torch-tfrecord`: look inside TFRecord files, check them, convert labeled data to them.

torch-tfrecord head data/train-00000-of-00008.tfrecord -n 3 [--json]
torch-tfrecord schema 'data/train-*.tfrecord'
torch-tfrecord schema ~/tensorflow_datasets/mnist/3.0.1
torch-tfrecord count data/train-*.tfrecord
torch-tfrecord verify data/
torch-tfrecord preview data/train-00000-of-00008.tfrecord --out grid.png
torch-tfrecord view data/ (a local web page)
torch-tfrecord convert coco instances.json images/ --out out/ --split train=0.9,val=0.1
torch-tfrecord cache du /scratch/tfrecord-cache
torch-tfrecord bench 'data/train-*.tfrecord' --workers 4
torch-tfrecord doctor [--json] (which fast paths this install has)

Errors are one line (``torch-tfrecord: error: ...``); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .bench import add_bench_command
from .cache import add_cache_command
from .convert import add_convert_command, is_conversion_error
from .doctor import add_doctor_command
from .inspect import add_inspect_commands
from .options import add_debug_option
from .view import add_view_command

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-tfrecord",
        description="Look inside TFRecord files, check them, and convert labeled data to them.",
        epilog="example:\n  torch-tfrecord head data/train-00000-of-00008.tfrecord -n 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspecting = add_inspect_commands(commands)
    converting = add_convert_command(commands)
    caching = add_cache_command(commands)
    benching = add_bench_command(commands)
    doctor = add_doctor_command(commands)
    add_debug_option(
        parser, *inspecting, *converting, *caching, *benching, *add_view_command(commands), doctor
    )
    return parser


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
        return 1 if args.command == "convert" and is_conversion_error(error) else 2
    return status
