"""The functions of ``tt.spark``: register the data source, read a DataFrame, write one."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession

from ...codec.decode import SpecArg
from ...codec.spec_file import encode_spec_json
from ...records.io import PathLike, StorageOptions, is_url, join
from ...records.manifest import manifest_for
from ...records.reader import OnError
from ...records.writer import WriteCompression
from .source import TFRecordDataSource

__all__ = ["read_tfrecords", "register", "write_tfrecords"]


def register(spark: SparkSession) -> None:
    """Registers the ``"tfrecord"`` format with ``spark`` (once per session).

    Example:
        >>> tt.spark.register(spark)  # doctest: +SKIP
        >>> df = spark.read.format("tfrecord").load("data/train.manifest.json")  # doctest: +SKIP
    """
    spark.dataSource.register(TFRecordDataSource)


def read_tfrecords(
    spark: SparkSession,
    sources: PathLike | Sequence[PathLike],
    *,
    spec: SpecArg | Literal["raw"] = None,
    context_spec: SpecArg = None,
    sequence_spec: SpecArg = None,
    on_error: OnError = "raise",
    verify_crc: bool = True,
    max_partition_bytes: int = 128 << 20,
    storage_options: StorageOptions = None,
) -> DataFrame:
    """Reads TFRecord files (Examples, SequenceExamples or raw records) into a DataFrame.

    One row per record. Partitions are record ranges of about ``max_partition_bytes``, planned from
    the dataset's manifest or the shards' indexes (a file with neither, or compressed, is one
    partition, read front to back). Shards in Hive-style folders below the folder or manifest
    named (``country=DE/``, as ``partition_by`` writes them) have each folder level as a column,
    after the records' (typed as Spark types Parquet's: integers ``int``, numbers ``double``, else
    ``string``).

    Args:
        spark: the session (the format is registered with it).
        sources: files, globs, folders, URLs, or a manifest (``.../train.manifest.json``).
        spec: the features (as for :class:`torch_tfrecord.TFRecordDataset`): a numeric FixedLen
            becomes a number (an array per dimension of its shape), a VarLen an array, bytes
            binary, str string; a FixedLen without a default that a record lacks is a null.
            None: the spec the manifest saved, else one inferred from the first records (images
            as binary). ``"raw"``: one binary column ``record``.
        context_spec, sequence_spec: for SequenceExamples: context columns as for Examples,
            each feature list an array of its steps.
        on_error: ``"raise"`` (a damaged record fails the task, naming its file, offset and
            record), or ``"skip"``: it is left out, logged and counted in the executor's log.
        verify_crc: check both CRCs of each record.
        max_partition_bytes: the framed bytes a partition reads, about.
        storage_options: for the fsspec file system of URLs.

    Example:
        >>> df = tt.spark.read_tfrecords(spark, "out/train.manifest.json")  # doctest: +SKIP
    """
    register(spark)
    reader = spark.read.format("tfrecord")
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    reader = reader.option("paths", json.dumps([os.fspath(item) for item in items]))
    if spec == "raw":
        reader = reader.option("record_type", "raw")
    elif sequence_spec is not None:
        reader = reader.option("record_type", "sequence_example")
        reader = reader.option(
            "spec", encode_spec_json(context_spec=context_spec or {}, sequence_spec=sequence_spec)
        )
    elif spec is not None:
        reader = reader.option("spec", encode_spec_json(spec))  # type: ignore[arg-type]
    reader = reader.option("on_error", on_error).option("verify_crc", str(verify_crc).lower())
    reader = reader.option("max_partition_bytes", str(max_partition_bytes))
    if storage_options:
        reader = reader.option("storage_options", json.dumps(dict(storage_options)))
    return reader.load()


def write_tfrecords(
    df: DataFrame,
    path: PathLike,
    *,
    spec: Mapping[str, Any] | None = None,
    prefix: str = "part",
    compression: WriteCompression = None,
    max_records_per_shard: int | None = None,
    partition_by: Sequence[str] = (),
    mode: Literal["error", "overwrite"] = "error",
    storage_options: StorageOptions = None,
) -> str:
    """Writes a DataFrame's rows as Examples into indexed shards under ``path``, with the manifest.

    Column types become Feature lists: integers and booleans int64_list, floats float_list, strings
    and binary bytes_list, arrays of them the same; a null leaves the feature out of the record
    (read back, a scalar is null again, an array empty). Maps, structs, dates, decimals and arrays
    of arrays are refused before any task runs: cast them first.

    Each task writes its shards under hidden names; the commit renames them
    ``{prefix}-00000-of-000NN{suffix}`` and writes ``{prefix}.manifest.json`` with the spec that
    reads the columns back, so ``tt.TFRecordDataset(path)`` and :func:`read_tfrecords` start at
    once. A failed, killed, retried or speculative task attempt leaves no shard behind.

    Args:
        df: the rows.
        path: the output folder (local or a URL).
        spec: the spec the manifest keeps (default: the one derived from the columns' types).
        prefix: the shards' file name prefix.
        compression: None, ``"gzip"`` or ``"zlib"`` (compressed shards have no index).
        max_records_per_shard: a task starts a new shard after this many records (default: one
            shard per task, and per partition folder).
        partition_by: columns whose values name folders (``label=3/``), Hive style; they are not
            stored in the records.
        mode: ``"error"`` when ``path`` holds a dataset of ``prefix`` already, or ``"overwrite"``.
        storage_options: for the fsspec file system of URLs.

    Returns:
        The manifest's path.

    Example:
        >>> tt.spark.write_tfrecords(df, "out/train", max_records_per_shard=100_000)  # doctest: +SKIP
        'out/train/part.manifest.json'
    """
    if mode not in ("error", "overwrite"):
        raise ValueError(f"{mode=} must be 'error' or 'overwrite'")
    register(df.sparkSession)
    writer = df.write.format("tfrecord").mode("overwrite" if mode == "overwrite" else "append")
    writer = writer.option("prefix", prefix).option("compression", compression or "none")
    if max_records_per_shard is not None:
        writer = writer.option("max_records_per_shard", str(max_records_per_shard))
    if partition_by:
        writer = writer.option("partition_by", ",".join(partition_by))
    if spec is not None:
        writer = writer.option("spec", encode_spec_json(spec))
    if storage_options:
        writer = writer.option("storage_options", json.dumps(dict(storage_options)))
    location = os.fspath(path)
    writer.save(location)
    root = location if is_url(location) else os.path.abspath(location)
    return manifest_for(join(root, prefix))
