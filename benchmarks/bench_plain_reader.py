"""The plain record reader (``tt.read_records``) against the `tfrecords` package, in one run.

Reads 4 shards x 20,000 records of ~35 bytes and of ~4 KB (random sizes around those means,
files in the page cache), each way 5 times (median), and prints records/s with ratios:

- ours, native: the compiled extension frames and checks each read buffer (the default);
- ours, python: the same reader with ``TORCH_TFRECORD_DECODER=python`` (the fallback loop);
- peer: the `tfrecords` package (C++, TensorFlow's record reader; it checks CRCs), when
  installed. It is a benchmark peer only, never a dependency:

    python -m venv --system-site-packages /tmp/peer && /tmp/peer/bin/pip install tfrecords
    PYTHONPATH=$PWD /tmp/peer/bin/python benchmarks/bench_plain_reader.py [--dir DIR] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable

from bench_records import make_dataset, read_all, timed

from torch_tfrecord.support import extension as _extension

SHARDS = 4


def ours(paths: list[str], reader: str, verify_crc: bool) -> Callable[[], tuple[int, int]]:
    def read() -> tuple[int, int]:
        os.environ[_extension.ENV_VAR] = reader
        try:
            return read_all(paths, verify_crc)
        finally:
            del os.environ[_extension.ENV_VAR]

    return read


def peer(paths: list[str]) -> Callable[[], tuple[int, int]]:
    import tfrecords

    def read() -> tuple[int, int]:
        records = payload = 0
        for path in paths:
            for data in tfrecords.tf_record_iterator(path):
                records += 1
                payload += len(data)
        return records, payload

    return read


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", help="where to keep the generated data (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        import tfrecords  # noqa: F401

        has_peer = True
    except ImportError:
        has_peer = False
        print("the `tfrecords` package is not installed: no peer column (see this script's help)")
    if _extension.compiled is None:
        print("the native extension is not built: 'ours, native' runs the Python loop too")
    directory = args.dir or tempfile.mkdtemp(prefix="tt-bench-")
    os.makedirs(directory, exist_ok=True)
    datasets = {
        "35B": make_dataset(directory, "plain-small", 35, 3, shards=SHARDS),
        "4KB": make_dataset(directory, "plain-large", 4096, 4, shards=SHARDS),
    }
    columns = f"{'data':5} {'reader':26} {'records':>8} {'median s':>9} {'records/s':>11}"
    print(f"{columns}  {'x python':>8} {'x peer':>7}")
    for name, paths in datasets.items():
        for verify_crc in (True, False):
            crc = "CRC" if verify_crc else "no CRC"
            runs = {
                f"ours, native, {crc}": ours(paths, "auto", verify_crc),
                f"ours, python, {crc}": ours(paths, "python", verify_crc),
            }
            if verify_crc and has_peer:
                runs["peer: tfrecords pkg, CRC"] = peer(paths)
            rates = {}
            for label, run in runs.items():
                seconds, records, _ = timed(run, args.repeats)
                rates[label] = (records, seconds, records / seconds)
            python_rate = rates[f"ours, python, {crc}"][2]
            peer_rate = rates["peer: tfrecords pkg, CRC"][2] if "peer: tfrecords pkg, CRC" in rates else None
            for label, (records, seconds, rate) in rates.items():
                versus_peer = f"{rate / peer_rate:7.2f}" if peer_rate else f"{'-':>7}"
                print(
                    f"{name:5} {label:26} {records:8d} {seconds:9.3f} {rate:11,.0f}  "
                    f"{rate / python_rate:8.2f} {versus_peer}"
                )


if __name__ == "__main__":
    main()
