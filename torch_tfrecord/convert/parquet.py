"""TFRecord to Parquet and back, streaming: a batch of records (one row group) in memory at a time.

    tt.to_parquet("train-*.tfrecord", "train.parquet")        # for DuckDB, pandas, Polars, the Hub
    tt.from_parquet("train.parquet", "shards/")               # Examples again, spec.json beside them

Columns follow :mod:`torch_tfrecord.codec.arrow` (FixedLen as fixed-size lists, VarLen as lists,
bytes binary, SequenceExample feature lists as lists of steps); images and raw tensors keep
their stored bytes (binary). The spec goes into the Parquet schema's metadata, so that
:func:`from_parquet` writes the same Examples (same values, same list types) back. Needs
pyarrow (the ``arrow`` extra).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ..codec.decode import decode_batch, decode_sequence_batch
from ..codec.encode import encode_example, encode_sequence_example
from ..codec.schema import InferredSequenceSpec, infer_spec
from ..codec.spec import FeatureSpec, FixedLen, Image, RawTensor, VarLen, normalize_spec
from ..codec.spec_file import decode_spec_json, encode_spec_json, read_spec_file, write_spec_file
from ..errors import SourceNotFoundError, SpecError
from ..records.atomic import PendingFile
from ..records.io import PathLike, StorageOptions
from ..records.listing import expand_sources
from ..records.reader import read_records
from ..records.writer import WriteCompression
from ..support.extras import install_hint
from ..support.text import progress_bar
from ._write import ConversionError, ConversionResult, shard_options, write_stream

__all__ = ["SPEC_METADATA_KEY", "decode_parquet_spec", "from_parquet", "to_parquet"]

SPEC_METADATA_KEY = b"torch_tfrecord.spec"


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"Parquet needs pyarrow: {install_hint('arrow')}") from None
    return pa, pq


def _stored(spec: FeatureSpec) -> FeatureSpec:
    """What a column holds of a feature: an image's or raw tensor's bytes as stored."""
    return FixedLen((), bytes) if isinstance(spec, Image | RawTensor) else spec


def _specs(
    files: list[str], spec: Any, context_spec: Any, sequence_spec: Any, storage_options: StorageOptions
) -> dict[str, dict[str, FeatureSpec]]:
    if spec is None and context_spec is None and sequence_spec is None:
        saved = read_spec_file(files, storage_options)
        if saved is not None:
            return saved
        inferred = infer_spec(files, storage_options=storage_options)
        if isinstance(inferred, InferredSequenceSpec):
            context, steps = dict(inferred.context_spec), dict(inferred.sequence_spec)
            return {"context_spec": context, "sequence_spec": steps}
        return {"spec": dict(inferred)}
    if sequence_spec is not None:
        return {
            "context_spec": normalize_spec(context_spec) or {},
            "sequence_spec": normalize_spec(sequence_spec) or {},
        }
    return {"spec": normalize_spec(spec) or {}}


def _batches(
    files: list[str], batch_size: int, storage_options: StorageOptions
) -> Iterator[tuple[list[bytes], list[str]]]:
    records: list[bytes] = []
    where: list[str] = []
    for path in files:
        for number, record in enumerate(read_records(path, storage_options=storage_options)):
            records.append(record)
            where.append(f"record {number} of {path!r}")
            if len(records) == batch_size:
                yield records, where
                records, where = [], []
    if records:
        yield records, where


def _table(records: list[bytes], where: list[str], specs: Mapping[str, Mapping[str, FeatureSpec]]) -> Any:
    pa, _ = _pyarrow()
    from ..codec.arrow import plain_column, steps_array

    if "sequence_spec" in specs:
        context_spec = {k: _stored(v) for k, v in specs["context_spec"].items()}
        sequence_spec = specs["sequence_spec"]
        context, sequences, lengths = decode_sequence_batch(
            records, context_spec, sequence_spec, locations=where
        )
        arrays = {key: plain_column(context_spec[key], value) for key, value in context.items()}
        for key, value in sequences.items():
            arrays[key] = steps_array(sequence_spec[key], value, lengths[key])
        return pa.table(arrays)
    spec = {key: _stored(value) for key, value in specs["spec"].items()}
    columns = decode_batch(records, spec, locations=where)
    return pa.table({key: plain_column(spec[key], columns[key]) for key in spec})


class _Files:
    """Parquet files written under temporary names, renamed into place when all succeeded."""

    def __init__(self, out: str, rows_per_file: int | None) -> None:
        self.out, self.rows_per_file = out, rows_per_file
        self.finals: list[str] = []
        self._pending: list[PendingFile] = []

    def next_stream(self) -> Any:
        if self.rows_per_file is None:
            final = self.out
        else:
            final = os.path.join(self.out, f"part-{len(self.finals):05d}.parquet")
        os.makedirs(os.path.dirname(os.path.abspath(final)), exist_ok=True)
        self._pending.append(PendingFile(final))
        self.finals.append(final)
        return self._pending[-1].stream

    def publish(self) -> list[str]:
        for pending, final in zip(self._pending, self.finals, strict=True):
            pending.stream.close()
            pending.publish(final)
        return self.finals

    def abort(self) -> None:
        for pending in self._pending:
            pending.stream.close()
            pending.discard()


def to_parquet(
    sources: PathLike | Sequence[PathLike],
    out: str | os.PathLike[str],
    *,
    spec: Mapping[str, Any] | None = None,
    context_spec: Mapping[str, Any] | None = None,
    sequence_spec: Mapping[str, Any] | None = None,
    rows_per_file: int | None = None,
    batch_size: int = 1024,
    compression: str = "zstd",
    progress: bool = False,
    storage_options: StorageOptions = None,
) -> list[str]:
    """Converts TFRecord files to Parquet, one row per record, in bounded memory.

    Columns: FixedLen numbers as a primitive column (shape ``()``) or nested fixed-size lists;
    VarLen as lists; bytes as binary, str as string; images and raw tensors as the bytes stored;
    SequenceExample feature lists as lists of steps. The spec is kept in the schema's metadata
    (``torch_tfrecord.spec``) for :func:`from_parquet`.

    Args:
        sources: TFRecord files, globs or directories.
        out: the Parquet file; with ``rows_per_file``, a directory of ``part-00000.parquet`` ...
        spec: the feature spec; or ``context_spec`` and ``sequence_spec`` for
            SequenceExamples. None: the ``spec.json`` beside the sources, else
            :func:`~torch_tfrecord.infer_spec`'s proposal.
        rows_per_file: start a new file after this many rows (a multiple of ``batch_size``
            rounded up).
        batch_size: records per row group: the memory held is about one batch.
        compression: the Parquet codec (``"zstd"``, ``"snappy"``, ``"none"`` ...).
        progress: a progress bar on stderr.
        storage_options: for the fsspec file system of URL sources (``out`` is local).

    Returns:
        The Parquet files written. Each stays under a temporary name until all are written.

    Raises:
        FeatureError: a record that does not fit the spec, naming its key, record and file.
    """
    pq = _pyarrow()[1]
    if batch_size < 1 or (rows_per_file is not None and rows_per_file < 1):
        raise ValueError(f"{batch_size=} and {rows_per_file=} must be positive")
    files = expand_sources(sources, storage_options)
    specs = _specs(files, spec, context_spec, sequence_spec, storage_options)
    metadata = {SPEC_METADATA_KEY: encode_spec_json(**_spec_kwargs(specs)).encode()}
    outputs = _Files(os.fspath(out), rows_per_file)
    bar = progress_bar(0, "record", progress)
    writer, rows_in_file = None, 0
    try:
        for records, where in _batches(files, batch_size, storage_options):
            table = _table(records, where, specs)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
            if writer is None or (rows_per_file is not None and rows_in_file >= rows_per_file):
                if writer is not None:
                    writer.close()
                writer = pq.ParquetWriter(outputs.next_stream(), table.schema, compression=compression)
                rows_in_file = 0
            writer.write_table(table)
            rows_in_file += table.num_rows
            if bar is not None:
                bar.update(table.num_rows)
        if writer is None:  # no records: one empty file with the schema
            table = _table([], [], specs).replace_schema_metadata(metadata)
            writer = pq.ParquetWriter(outputs.next_stream(), table.schema, compression=compression)
            writer.write_table(table)
        writer.close()
    except BaseException:
        if writer is not None:
            writer.close()
        outputs.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return outputs.publish()


def _spec_kwargs(specs: Mapping[str, Any]) -> dict[str, Any]:
    return dict(specs)


# Parquet to TFRecord -------------------------------------------------------------------------


def _parquet_files(sources: PathLike | Sequence[PathLike]) -> list[str]:
    items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    found: list[str] = []
    for item in (os.fspath(i) for i in items):
        if os.path.isdir(item):
            found += sorted(glob.glob(os.path.join(glob.escape(item), "**", "*.parquet"), recursive=True))
        elif glob.has_magic(item):
            found += sorted(glob.glob(item, recursive=True))
        elif os.path.exists(item):
            found.append(item)
        else:
            raise SourceNotFoundError(f"{item!r} does not exist")
    if not found:
        raise SourceNotFoundError(f"no Parquet files in {items!r}")
    return found


_ARROW_INTS = {f"int{n}": getattr(torch, f"int{n}") for n in (8, 16, 32, 64)}
_ARROW_FLOATS = {"halffloat": torch.float16, "float": torch.float32, "double": torch.float64}


def _column_spec(name: str, kind: Any, nullable: bool, source: str) -> FeatureSpec:
    """The spec of a column of a Parquet file written by someone else (no spec in its metadata)."""
    pa = _pyarrow()[0]
    shape: list[int] = []
    inner = kind
    while pa.types.is_fixed_size_list(inner):
        shape.append(inner.list_size)
        inner = inner.value_type
    varying = pa.types.is_list(inner) or pa.types.is_large_list(inner)
    while pa.types.is_list(inner) or pa.types.is_large_list(inner) or pa.types.is_fixed_size_list(inner):
        varying = True
        inner = inner.value_type
    dtype: Any
    if pa.types.is_boolean(inner):
        dtype = torch.bool
    elif str(inner) in _ARROW_INTS or str(inner) == "uint8":
        dtype = _ARROW_INTS.get(str(inner), torch.uint8)
    elif pa.types.is_integer(inner):
        dtype = torch.int64
    elif str(inner) in _ARROW_FLOATS:
        dtype = _ARROW_FLOATS[str(inner)]
    elif pa.types.is_string(inner) or pa.types.is_large_string(inner):
        dtype = str
    elif pa.types.is_binary(inner) or pa.types.is_large_binary(inner) or pa.types.is_fixed_size_binary(inner):
        dtype = bytes
    else:
        raise ConversionError(f"{source} column {name!r}: {kind} values fit no feature type")
    if varying or nullable or (dtype in (bytes, str) and len(shape) > 1):
        return VarLen(dtype)
    return FixedLen(tuple(shape), dtype)


def _flattened(table: Any) -> Any:
    """Struct columns as ``a/b`` columns, as nested dicts become keys."""
    while any(str(field.type).startswith("struct") for field in table.schema):
        table = table.flatten()
    return table.rename_columns([name.replace(".", "/") for name in table.column_names])


def decode_parquet_spec(
    metadata: Mapping[bytes, bytes] | None, source: str
) -> dict[str, dict[str, FeatureSpec]] | None:
    """The spec :func:`to_parquet` keeps in a Parquet schema's metadata (None: none there), read
    as spec.json is, within its bounds.

    Raises:
        SpecError: a malformed one, naming ``source``.
    """
    saved = (metadata or {}).get(SPEC_METADATA_KEY)
    if saved is None:
        return None
    try:
        text = bytes(saved).decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"{source}: the spec in its Parquet metadata is not UTF-8: {error}") from None
    return decode_spec_json(text, source=f"{source} (Parquet metadata)")


def _unreadable(path: str, error: Exception) -> ConversionError:
    return ConversionError(f"{path!r} is not a Parquet file pyarrow reads: {type(error).__name__}: {error}")


def _records(files: list[str], found: dict[str, Any]) -> Iterator[bytes]:
    """Each row of each file as a serialized Example (or SequenceExample, by the saved spec)."""
    pa, pq = _pyarrow()
    from ..codec.arrow import row_values

    for path in files:
        try:  # pre_buffer (pyarrow's default) keeps every row group read so far: 2 GB of RSS for 2 GB
            parquet = pq.ParquetFile(path, pre_buffer=False)
            metadata = parquet.schema_arrow.metadata
        except (OSError, ValueError, pa.ArrowException) as error:
            raise _unreadable(path, error) from None
        specs = decode_parquet_spec(metadata, path)
        if found.setdefault("specs", specs) != specs:
            raise ConversionError(f"{path!r} holds another spec than {files[0]!r}: convert them apart")
        sequences = set((specs or {}).get("sequence_spec", {}))
        row = 0
        for batch in _batches_of(parquet, path, pa):
            table = _flattened(batch if specs else _as_table(batch))
            if specs is None:
                for field in table.schema:
                    nulls = found.setdefault("nulls", {})
                    nulls[field.name] = (
                        nulls.get(field.name, False) or table.column(field.name).null_count > 0
                    )
                    if field.name not in found.setdefault("types", {}):
                        _column_spec(field.name, field.type, False, repr(path))  # fits a feature?
                        found["types"][field.name] = (field.type, repr(path))
            names = table.column_names
            columns = [
                table.column(name).to_pylist() if name in sequences else row_values(table.column(name))
                for name in names
            ]
            for i in range(table.num_rows):
                values = {name: column[i] for name, column in zip(names, columns) if column[i] is not None}
                try:
                    if sequences:
                        lists = {k: values.pop(k) for k in list(values) if k in sequences}
                        yield encode_sequence_example(values, lists)
                    else:
                        yield encode_example(values)
                except (TypeError, ValueError) as error:
                    raise ConversionError(f"{path!r} row {row + i}: {error}") from None
            row += table.num_rows


def _batches_of(parquet: Any, path: str, pa: Any) -> Iterator[Any]:
    """The file's rows, 1024 at a time; a damaged file is a ConversionError naming it."""
    batches = parquet.iter_batches(batch_size=1024)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, ValueError, pa.ArrowException) as error:
            raise _unreadable(path, error) from None
        yield batch


def _as_table(batch: Any) -> Any:
    pa, _ = _pyarrow()
    return pa.Table.from_batches([batch])


def _same(record: bytes) -> bytes:
    return record


def from_parquet(
    sources: PathLike | Sequence[PathLike],
    out_dir: str | os.PathLike[str],
    *,
    shard_size: int | None = None,
    name: str = "data",
    compression: WriteCompression = None,
    progress: bool = False,
    storage_options: StorageOptions = None,
) -> ConversionResult:
    """Converts Parquet files to sharded, indexed TFRecord files of Examples, one per row.

    Files :func:`to_parquet` wrote give back the same Examples (their spec, kept in the
    metadata, says each column's feature type, and which are SequenceExample feature lists).
    Other files: integers and booleans become int64 lists, floats float lists, string and
    binary bytes lists; (nested) lists are flattened; struct columns become ``a/b`` keys; a
    null is a missing feature. The spec is saved as ``spec.json`` beside the shards.

    Args:
        sources: Parquet files, globs or directories (read in sorted order).
        out_dir: the directory (or URL prefix) of the shards ``{name}-00000-of-0000N.tfrecord``.
        shard_size: records per shard (default 1024).
        name: the shards' file name prefix.
        compression: None, ``"gzip"`` or ``"zlib"``.
        progress: a progress bar on stderr.
        storage_options: for the fsspec file system when ``out_dir`` is a URL.

    Raises:
        ConversionError: a value that fits no feature type, naming the file, row and column;
            nothing is left under a final name.
    """
    _pyarrow()
    files = _parquet_files(sources)
    options = shard_options(out_dir, name, shard_size, compression, progress, storage_options)
    found: dict[str, Any] = {}
    result = write_stream(_records(files, found), _same, options)
    specs = found.get("specs")
    if specs is None:
        specs = {
            "spec": {
                key: _column_spec(key, kind, found["nulls"][key], source)
                for key, (kind, source) in found.get("types", {}).items()
            }
        }
    result.spec = specs.get("spec") or specs
    result.spec_path = write_spec_file(options.out_dir, encode_spec_json(**specs), storage_options)
    return result
