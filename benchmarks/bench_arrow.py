"""The Arrow world: TFRecord -> Parquet, Parquet -> TFRecord, a torch Dataset -> TFRecord, TFRecord ->
a Hugging Face ``datasets.Dataset``; ours against the obvious alternatives, in one run.

One set of ~4 KB Examples (``image``: 3,400 random bytes, ``embedding``: 128 float32, ``label``: an
int64, ``tokens``: 0-63 int64s) in 4 shards. Each measurement runs in a fresh process, so that its
peak RSS (``ru_maxrss``: imports included, the ``base`` column is the RSS after the imports) is its
own; the table gives the median time of ``--repeats`` rounds, records/s, the time as a multiple of
ours (the first line of its group: 2.00 takes twice as long), and the largest peak RSS of the rounds.

- parquet: ``tt.to_parquet(shards, out, spec=...)`` against TensorFlow's own fast path,
  ``tf.data.TFRecordDataset(shards).batch(1024).map(tf.io.parse_example)``, each batch made a
  ``pyarrow.Table`` of the same column types and written with the same ``pq.ParquetWriter``
  (zstd), under ``--tf-python`` (a venv with tensorflow-cpu and pyarrow; never a dependency).
- from-parquet: ``tt.from_parquet`` of ours' Parquet file (no peer: TensorFlow has no reader).
- dataset: a map-style torch ``Dataset`` of dicts written by ``tt.write_dataset`` (one shard, its
  index and spec.json) against the ``tfrecord`` package's ``TFRecordWriter`` (one file, no index)
  writing the same samples as ``{key: (value, type)}``.
- hf: ``tt.to_hf`` (records -> Parquet -> ``Dataset.from_parquet``) against
  ``datasets.Dataset.from_generator`` fed the decoded rows of ``tt.TFRecordDataset``, with the
  same ``Features``.

    python benchmarks/bench_arrow.py --dir /tmp/ttbench-arrow --tf-python /tmp/tfvenv/bin/python
    python benchmarks/bench_arrow.py --dir /tmp/ttbench-arrow --records 500000 --only parquet,from-parquet
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

SHARDS = 4
POOL = 256  # distinct records, written in turn
IMAGE_BYTES = 3_400
GROUPS = ("parquet", "from-parquet", "dataset", "hf")


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pool() -> list[dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 256, IMAGE_BYTES, dtype=np.uint8).tobytes(),
            "embedding": rng.standard_normal(128).astype(np.float32),
            "label": int(i),
            "tokens": rng.integers(0, 30_000, int(rng.integers(0, 64))).astype(np.int64),
        }
        for i in range(POOL)
    ]


def spec() -> dict[str, Any]:
    import torch

    import torch_tfrecord as tt

    return {
        "image": tt.FixedLen((), bytes),
        "embedding": tt.FixedLen((128,), torch.float32),
        "label": tt.FixedLen((), torch.int64),
        "tokens": tt.VarLen(torch.int64),
    }


def make_shards(directory: str, records: int) -> list[str]:
    import torch_tfrecord as tt

    found = sorted(glob.glob(os.path.join(directory, "data", "data-*-of-*.tfrecord")))
    marker = os.path.join(directory, "data", f"records-{records}")
    if found and os.path.exists(marker):
        return found
    shutil.rmtree(os.path.join(directory, "data"), ignore_errors=True)
    os.makedirs(os.path.join(directory, "data"))
    encoded = [
        tt.encode_example({**s, "tokens": tt.Int64List(s["tokens"]), "image": tt.BytesList([s["image"]])})
        for s in _pool()
    ]
    per_shard = -(-records // SHARDS)
    with tt.ShardedExampleWriter(os.path.join(directory, "data", "data"), max_records=per_shard) as writer:
        for i in range(records):
            writer.write(encoded[i % POOL])
    open(marker, "w").close()
    return writer.shard_paths


class PoolDataset:
    """A map-style torch Dataset of dicts (the pool's samples in turn), cheap to index."""

    def __init__(self, records: int) -> None:
        self.records, self.pool = records, _pool()

    def __len__(self) -> int:
        return self.records

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.pool[index % POOL]


# One measurement, in its own process -----------------------------------------------------------


def child(task: str, directory: str, records: int, scratch: str) -> dict[str, float]:
    """Runs one task; its time, the RSS after the imports and the peak RSS."""
    import datasets  # noqa: F401  (imports before the base RSS, for every task alike)
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401

    import torch_tfrecord as tt
    from torch_tfrecord.integrations.hf import to_hf  # noqa: F401  (tt's lazy names loaded up front)

    for name in ("to_parquet", "from_parquet", "write_dataset", "TFRecordDataset"):
        getattr(tt, name)
    shards = sorted(glob.glob(os.path.join(directory, "data", "data-*-of-*.tfrecord")))
    parquet = os.path.join(directory, "data", "ours.parquet")  # to_parquet's, from_parquet's input
    source = PoolDataset(records) if task in ("write_dataset", "tfrecord_pkg") else None
    base = _rss_mb()
    start = time.perf_counter()
    if task == "to_parquet":
        tt.to_parquet(shards, parquet, spec=spec())
    elif task == "from_parquet":
        tt.from_parquet(parquet, scratch, shard_size=10_000)
    elif task == "write_dataset":
        tt.write_dataset(source, scratch, shard_size=records)
    elif task == "tfrecord_pkg":
        import tfrecord  # type: ignore[import-untyped]

        os.makedirs(scratch, exist_ok=True)
        writer = tfrecord.TFRecordWriter(os.path.join(scratch, "data.tfrecord"))
        for i in range(records):
            s = source[i]  # type: ignore[index]
            writer.write(
                {
                    "image": (s["image"], "byte"),
                    "embedding": (s["embedding"], "float"),
                    "label": (s["label"], "int"),
                    "tokens": (s["tokens"], "int"),
                }
            )
        writer.close()
    elif task == "to_hf":
        hf = tt.to_hf(shards, spec=spec(), cache_dir=scratch)
        assert len(hf) == records
    elif task == "hf_generator":
        hf = _from_generator(shards, scratch)
        assert len(hf) == records
    else:
        raise ValueError(task)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "base_mb": base, "peak_mb": _peak_mb()}


def decoded_rows(files: list[str]) -> Any:
    """The rows of the shards, decoded by ``tt.TFRecordDataset``, as numpy and Python values."""
    import torch_tfrecord as tt

    for row in tt.TFRecordDataset(files, spec=spec()):
        yield {key: value.numpy() if hasattr(value, "numpy") else value for key, value in row.items()}


def _from_generator(shards: list[str], scratch: str) -> Any:
    import datasets

    from torch_tfrecord.integrations.hf import hf_features

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_arrow  # by its name, not __main__: datasets pickles the generator by reference

    return datasets.Dataset.from_generator(
        bench_arrow.decoded_rows,
        gen_kwargs={"files": shards},
        features=hf_features(spec()),
        cache_dir=scratch,
    )


TF_SCRIPT = r"""
import glob, json, os, resource, sys, time
import numpy as np, pyarrow as pa, pyarrow.parquet as pq, tensorflow as tf

directory, out = sys.argv[1], sys.argv[2]
shards = sorted(glob.glob(os.path.join(directory, "data", "data-*-of-*.tfrecord")))
features = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "embedding": tf.io.FixedLenFeature([128], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "tokens": tf.io.VarLenFeature(tf.int64),
}
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) / 1024
base = rss()
start = time.perf_counter()
ds = tf.data.TFRecordDataset(shards).batch(1024).map(lambda x: tf.io.parse_example(x, features))
writer = None
for batch in ds:
    tokens = tf.RaggedTensor.from_sparse(batch["tokens"])
    table = pa.table({
        "image": pa.array(batch["image"].numpy().tolist(), pa.binary()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(batch["embedding"].numpy().reshape(-1)), 128),
        "label": pa.array(batch["label"].numpy()),
        "tokens": pa.ListArray.from_arrays(
            pa.array(tokens.row_splits.numpy().astype(np.int32)), pa.array(tokens.values.numpy())
        ),
    })
    if writer is None:
        writer = pq.ParquetWriter(out, table.schema, compression="zstd")
    writer.write_table(table)
writer.close()
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "base_mb": base,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# The run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, task: str) -> dict[str, float] | None:
    """The median of ``repeats`` runs of a task, each in a fresh process (None: peer missing)."""
    runs = []
    for round_ in range(args.repeats):
        scratch = os.path.join(args.dir, f"scratch-{task}-{round_}")
        shutil.rmtree(scratch, ignore_errors=True)
        if task == "tensorflow":
            if not args.tf_python:
                return None
            os.makedirs(scratch)
            command = [args.tf_python, "-c", TF_SCRIPT, args.dir, os.path.join(scratch, "tf.parquet")]
        else:
            command = [sys.executable, __file__, "--child", task, "--dir", args.dir,
                       "--records", str(args.records), "--scratch", scratch]  # fmt: skip
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode != 0:
            if "No module named 'tfrecord'" in done.stderr:
                return None
            raise RuntimeError(f"{task} failed:\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "base_mb": max(r["base_mb"] for r in runs),
        "peak_mb": max(r["peak_mb"] for r in runs),
    }


TASKS = {
    "parquet": [("to_parquet", "ours: tt.to_parquet"), ("tensorflow", "peer: TF parse_example + pyarrow")],
    "from-parquet": [("from_parquet", "ours: tt.from_parquet")],
    "dataset": [("write_dataset", "ours: tt.write_dataset"), ("tfrecord_pkg", "peer: tfrecord pkg writer")],
    "hf": [("to_hf", "ours: tt.to_hf (via Parquet)"), ("hf_generator", "alt: Dataset.from_generator")],
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default="/tmp/ttbench-arrow", help="where the data and outputs go")
    parser.add_argument("--records", type=int, default=20_000, help="records of ~4 KB (default 20,000)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per task (default 3)")
    parser.add_argument("--tf-python", help="a Python with tensorflow-cpu and pyarrow, for the peer")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"groups to run, of {','.join(GROUPS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dir, args.records, args.scratch)))
        return
    os.makedirs(args.dir, exist_ok=True)
    shards = make_shards(args.dir, args.records)
    size_mb = sum(os.path.getsize(p) for p in shards) / 1e6
    print(f"{args.records:,} records, {size_mb:,.0f} MB in {len(shards)} shards; median of {args.repeats}")
    header = f"{'group':13} {'tool':34} {'median s':>9} {'records/s':>10} {'x ours':>8}"
    print(f"{header} {'base MB':>8} {'RSS MB':>8}")
    groups = args.only.split(",")
    for group in groups:
        if group == "from-parquet" and not os.path.exists(os.path.join(args.dir, "data", "ours.parquet")):
            measure(argparse.Namespace(**{**vars(args), "repeats": 1}), "to_parquet")  # its input
        ours = None
        for task, label in TASKS[group]:
            result = measure(args, task)
            if result is None:
                print(f"{group:13} {label:34} {'(not installed)':>9}")
                continue
            ours = ours or result["seconds"]
            print(
                f"{group:13} {label:34} {result['seconds']:9.2f} {args.records / result['seconds']:10,.0f}"
                f" {result['seconds'] / ours:8.2f} {result['base_mb']:8.0f} {result['peak_mb']:8.0f}"
            )


if __name__ == "__main__":
    main()
