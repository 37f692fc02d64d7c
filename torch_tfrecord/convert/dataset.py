"""Any dataset to TFRecord: a torch Dataset, a Hugging Face ``datasets.Dataset``, or dicts.

    spec = tt.write_dataset(my_dataset, "out/", shard_size=10_000).spec
    ds = tt.TFRecordDataset("out/")  # the spec saved beside the shards, read back by itself

Samples become Examples as :mod:`.samples` says; shards are written by :mod:`._write` (indexed,
atomic, in worker processes with ``jobs``), and the spec that reads them back is saved as
``spec.json`` beside them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..codec.spec import normalize_spec
from ..codec.spec_file import encode_spec_json, write_spec_file
from ..records.io import StorageOptions
from ..records.writer import WriteCompression
from ._write import ConversionError, ConversionResult, OnError, shard_options, write_records, write_stream
from .samples import ImageFormat, SampleEncoder, SpecBuilder

__all__ = ["write_dataset"]


@dataclasses.dataclass(frozen=True)
class _ItemEncoder:
    """Encodes the sample at an index of a map-style source (picklable, for worker processes)."""

    source: Any
    encoder: SampleEncoder

    def __call__(self, index: int) -> Any:
        try:
            sample = self.source[index]
        except ConversionError:
            raise
        except Exception as error:
            raise ConversionError(f"row {index}: reading the sample failed: {error!r}") from error
        return self.encoder(sample, index)


@dataclasses.dataclass(frozen=True)
class _RowEncoder:
    """Encodes a ``(row, sample)`` pair of an iterable source."""

    encoder: SampleEncoder

    def __call__(self, item: tuple[int, Any]) -> Any:
        return self.encoder(item[1], item[0])


def _is_map_style(source: Any) -> bool:
    from torch.utils.data import IterableDataset

    if isinstance(source, IterableDataset | Mapping):
        return False
    return hasattr(source, "__len__") and hasattr(source, "__getitem__")


def write_dataset(
    source: Any,
    out_dir: str | os.PathLike[str],
    *,
    shards: int | None = None,
    shard_size: int | None = None,
    spec: Mapping[str, Any] | None = None,
    compression: WriteCompression = None,
    name: str = "data",
    keys: Sequence[str] | None = None,
    image_format: ImageFormat = "png",
    jpeg_quality: int = 95,
    split: Mapping[str, float] | None = None,
    seed: int = 0,
    jobs: int = 1,
    on_error: OnError = "raise",
    progress: bool = False,
    storage_options: StorageOptions = None,
) -> ConversionResult:
    """Writes the samples of any dataset as sharded, indexed TFRecord files, and the spec beside them.

    Each sample (a dict; nested dicts become ``a/b`` keys; a tuple named by ``keys``) becomes an
    Example: numbers, numeric arrays and tensors as their values (``FixedLen(shape, dtype)``);
    str / bytes as bytes (``FixedLen((), str)``...); unsigned integer arrays (uint8 pictures)
    as their raw bytes (``RawTensor``); PIL images encoded as PNG or JPEG (``Image``). A 1-D
    value whose length varies, or a key some samples lack, is a ``VarLen``. The spec is saved
    as ``spec.json`` beside the shards, where ``tt.TFRecordDataset(out_dir)`` and
    ``tt.IndexedTFRecordDataset`` find it when given no spec.

    Args:
        source: a map-style or iterable torch ``Dataset``, a Hugging Face ``datasets.Dataset``
            or ``IterableDataset``, or any sequence or iterable of dicts. A source with a length
            is read by index (in ``jobs`` processes, which each get a pickled copy of it); one
            without is read once, in order, in bounded memory.
        out_dir: the directory (or URL prefix) of the shards ``{name}-00000-of-0000N.tfrecord``.
        shards: how many shards (a source with a length only); or
        shard_size: records per shard (default 1024).
        spec: the spec to save instead of the one found (e.g. with defaults, or ``Image``
            options); it must name the same keys.
        compression: None, ``"gzip"`` or ``"zlib"``.
        name: the shards' file name prefix.
        keys: names of the items of tuple samples, e.g. ``("image", "label")``.
        image_format: ``"png"`` (lossless) or ``"jpeg"`` for PIL images.
        jpeg_quality: the JPEG quality.
        split: ``{"train": 0.9, "val": 0.1}``: ratios, shuffled with ``seed`` (a source with
            a length only).
        seed: the seed of ``split``.
        jobs: encoding processes; a script using ``jobs > 1`` does so under
            ``if __name__ == "__main__":`` (they are spawned).
        on_error: ``"raise"`` (nothing is left under a final name) or ``"skip"`` bad samples.
        progress: a progress bar on stderr.
        storage_options: for the fsspec file system when ``out_dir`` is a URL.

    Returns:
        What was written: ``result.shards``, ``result.records``, and ``result.spec`` (saved as
        ``spec.json``, its path ``result.spec_path``).

    Raises:
        ConversionError: a sample that cannot be stored (a value of no feature type, a key
            whose type changes, a structure nested deeper than a feature holds), naming the key
            and the row; nothing is left under a final name.

    Example:
        >>> result = tt.write_dataset([{"x": [1.0, 2.0], "label": 3}], "out/")  # doctest: +SKIP
        >>> result.spec  # doctest: +SKIP
        {'x': tt.FixedLen(shape=(2,), dtype=torch.float32), 'label': tt.FixedLen(shape=(), dtype=torch.int64)}
    """
    sharding = {"shards": shards, "split": split, "seed": seed, "jobs": jobs, "on_error": on_error}
    options = shard_options(out_dir, name, shard_size, compression, progress, storage_options, **sharding)
    encoder = SampleEncoder(None if keys is None else tuple(keys), image_format, jpeg_quality)
    builder = SpecBuilder()
    if _is_map_style(source):
        result = write_records(
            range(len(source)), _ItemEncoder(source, encoder), options, observe=builder.add
        )
    else:
        rows: Iterable[Any] = enumerate(source)
        result = write_stream(rows, _RowEncoder(encoder), options, observe=builder.add)
    found = builder.spec()
    saved = found if spec is None else normalize_spec(spec)
    if saved is not None and spec is not None and set(saved) != set(found):
        raise ConversionError(
            f"spec= names {sorted(saved)}, but the samples hold {sorted(found)}: "
            "the spec must name the same keys"
        )
    result.spec = saved
    result.spec_path = write_spec_file(options.out_dir, encode_spec_json(saved), storage_options)
    return result
