"""TFRecord shards as a Hugging Face ``datasets.Dataset``, through Parquet, with ``Features`` from the spec.

    hf = tt.to_hf("train-*.tfrecord", label_map="label_map.pbtxt")

The records are converted to Parquet by :func:`torch_tfrecord.to_parquet` (streaming, in bounded
memory) and loaded with ``datasets.Dataset.from_parquet``, which memory-maps them. Needs the
``hf`` extra (datasets, pyarrow).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..codec.label_map import LabelMap
from ..codec.spec import FeatureSpec, FixedLen, FixedLenSequence, Image, RawTensor, VarLen
from ..codec.spec_file import decode_spec_json
from ..convert import read_label_map
from ..convert.parquet import SPEC_METADATA_KEY, to_parquet
from ..records.io import PathLike, StorageOptions
from ..support.extras import install_hint

__all__ = ["hf_features", "to_hf"]


def _datasets() -> Any:
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(f"tt.to_hf needs Hugging Face datasets: {install_hint('hf')}") from None
    return datasets


def _value(datasets: Any, dtype: Any) -> Any:
    if dtype is str:
        return datasets.Value("string")
    if dtype is bytes:
        return datasets.Value("binary")
    if dtype == torch.bfloat16:
        return datasets.Value("float32")
    return datasets.Value(str(dtype).removeprefix("torch."))


def _feature(datasets: Any, spec: FeatureSpec, labels: LabelMap | None) -> Any:
    if isinstance(spec, Image):
        return datasets.Image()
    if isinstance(spec, RawTensor):
        return datasets.Value("binary")
    if labels is not None and isinstance(spec, FixedLen) and spec.shape == ():
        return datasets.ClassLabel(names=_class_names(labels))
    value = _value(datasets, spec.dtype)
    if isinstance(spec, FixedLen):
        for size in reversed(spec.shape):
            value = datasets.Sequence(value, length=size)
        return value
    if isinstance(spec, FixedLenSequence):
        for size in reversed(spec.shape):
            value = datasets.Sequence(value, length=size)
        return datasets.Sequence(value)
    if not isinstance(spec, VarLen):
        raise TypeError(f"no Hugging Face feature for {spec!r}")
    return datasets.Sequence(value)


def _class_names(labels: LabelMap) -> list[str]:
    """ClassLabel names for ids 0..max (ids a label map skips, id 0 included, as ``"<id N>"``)."""
    top = max(labels.names, default=-1)
    return [labels.names.get(i, f"<id {i}>") for i in range(top + 1)]


def hf_features(
    spec: Mapping[str, FeatureSpec], *, label_key: str | None = None, label_map: LabelMap | None = None
) -> Any:
    """``datasets.Features`` for the columns :func:`~torch_tfrecord.to_parquet` writes for ``spec``:
    numbers as ``Value`` (fixed shapes as nested ``Sequence(length=n)``), images as ``Image``,
    ``label_key`` as a ``ClassLabel`` of ``label_map``'s names."""
    datasets = _datasets()
    return datasets.Features(
        {
            key: _feature(datasets, value, label_map if key == label_key else None)
            for key, value in spec.items()
        }
    )


def to_hf(
    sources: PathLike | Sequence[PathLike],
    *,
    spec: Mapping[str, Any] | None = None,
    label_key: str | None = None,
    label_map: LabelMap | str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    storage_options: StorageOptions = None,
) -> Any:
    """TFRecord files of Examples as a Hugging Face ``datasets.Dataset``.

    Args:
        sources: files, globs or directories.
        spec: the feature spec; None: the ``spec.json`` beside them, else the inferred one.
        label_key: the int feature to type as a ``ClassLabel``.
        label_map: its class names: a :class:`~torch_tfrecord.convert.LabelMap` or the path
            of a ``label_map.pbtxt`` (as the converters write it).
        cache_dir: where the Parquet file lives (the dataset memory-maps it); default a new
            temporary directory.
        storage_options: for URL sources.

    Returns:
        The ``datasets.Dataset``, with ``Features`` from the spec (``Image`` for images).
    """
    datasets = _datasets()
    labels = read_label_map(label_map) if isinstance(label_map, str) else label_map
    if labels is not None and label_key is None:
        raise ValueError("label_map= needs label_key=, the feature that holds the class ids")
    folder = os.fspath(cache_dir) if cache_dir is not None else tempfile.mkdtemp(prefix="tt-hf-")
    files = to_parquet(
        sources, os.path.join(folder, "data.parquet"), spec=spec, storage_options=storage_options
    )
    table = datasets.Dataset.from_parquet(files, cache_dir=folder)
    import pyarrow.parquet as pq  # the hf extra brings it

    saved = decode_spec_json(pq.read_schema(files[0]).metadata[SPEC_METADATA_KEY].decode(), source=files[0])
    found = (saved or {}).get("spec")
    if found is None:
        raise ValueError("tt.to_hf takes Examples; SequenceExamples go through tt.to_parquet")
    return table.cast(hf_features(found, label_key=label_key, label_map=labels))
