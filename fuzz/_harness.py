"""What every harness under fuzz/ shares: its command line and the rule every input must obey.

python fuzz/fuzz_X.py CORPUS_DIR [libFuzzer flags, e.g. -atheris_runs=100000 -max_total_time=60]
python fuzz/fuzz_X.py --write-seeds CORPUS_DIR      # (re)write the seed corpus
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

_T = TypeVar("_T")


class Rejected:
    """The outcome of an input the library refused with one of its own errors."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"Rejected({type(self.error).__name__}: {self.error})"


def attempt(call: Callable[[], _T]) -> _T | Rejected:
    """Runs ``call``: its result, or :class:`Rejected` for a TFRecordError.

    Any other exception propagates: that is the bug a harness is looking for (every input must
    either decode or raise a TFRecordError subclass).
    """
    from torch_tfrecord import TFRecordError

    try:
        return call()
    except TFRecordError as error:
        return Rejected(error)


def main(
    check: Callable[[bytes], None], seeds: Callable[[], Mapping[str, bytes]], load: Callable[[], Any]
) -> None:
    """The command line of a harness: write its seeds, or fuzz ``check`` with atheris.

    ``load`` imports what the harness exercises; it runs inside atheris's instrumentation, so
    that libFuzzer is steered by coverage of torch_tfrecord's Python code.
    """
    if sys.argv[1:2] == ["--write-seeds"]:
        directory = Path(sys.argv[2])
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in seeds().items():
            (directory / name).write_bytes(data)
        return
    import atheris

    logging.disable(logging.WARNING)  # skipped records are logged; the run would print little else
    with atheris.instrument_imports(include=["torch_tfrecord", "index_tools"]):
        load()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
