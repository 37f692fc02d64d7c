"""Writes shards of 2,000 Examples, for ever, printing each one finished (tests/test_faults.py kills it).

    python write_shards.py DIR sharded|single

``single``: one ExampleWriter per shard, each published under its final name when finished.
``sharded``: one ShardedExampleWriter, whose shards all keep temporary names until it is closed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch_tfrecord as tt


def main() -> None:
    directory, mode = Path(sys.argv[1]), sys.argv[2]
    record = 0
    if mode == "single":
        for shard in range(10**6):
            with tt.ExampleWriter(directory / f"part-{shard:05d}.tfrecord") as writer:
                for _ in range(2000):
                    writer.write({"id": record, "pad": [b"x" * 200]})
                    record += 1
            print(shard, flush=True)
    else:
        with tt.ShardedExampleWriter(directory / "train", max_records=2000) as writer:
            while True:
                writer.write({"id": record, "pad": [b"x" * 200]})
                record += 1
                if record % 2000 == 0:
                    print(record // 2000 - 1, flush=True)


if __name__ == "__main__":
    main()
