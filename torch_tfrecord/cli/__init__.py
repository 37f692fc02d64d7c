"""Layer 6, the ``torch-tfrecord`` command line: :func:`main` and its parser, one module per
group of commands. ``tfrecord-index`` (the ``index_tools`` package) shares :mod:`.options`."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
