"""``from_tfds``: a TFDS-prepared directory as a TFRecordDataset (or its map-style twin).

Wiring only: :mod:`.info` finds the directory and reads its metadata, :mod:`.splits` turns the
split string into record ranges of shards, :mod:`.features` makes the spec and the step from
decoded columns to TFDS's values, which runs as the dataset's transform (before the user's).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from ...codec.tf_jpeg import DCT
from ...data.dataset import TFRecordDataset
from ...data.indexed import IndexedTFRecordDataset
from ...records.io import StorageOptions
from ...records.shards.files import RecordFiles
from ...records.shards.index import IndexArg
from ...records.shards.resolve import CacheDir, resolve_paths
from .decoder import FeatureDecoder
from .features import ClassLabel, Feature, FeaturesDict, Image, Sequence, parse_features
from .info import DatasetInfo, TFDSFormatError, read_info, read_lines, resolve_version_dir
from .splits import parse_split, shard_ranges

__all__ = ["IndexedTFDSDataset", "TFDSDataset", "TFDSTransform", "from_tfds", "load_features"]


def _class_label_paths(feature: Feature, path: str = "") -> list[str]:
    if isinstance(feature, FeaturesDict):
        return [
            p
            for key, child in feature.features.items()
            for p in _class_label_paths(child, f"{path}/{key}" if path else key)
        ]
    if isinstance(feature, Sequence):
        return _class_label_paths(feature.feature, path)
    labeled = isinstance(feature, ClassLabel) or (
        isinstance(feature, Image) and feature.kind == "LabeledImage"
    )
    return [path] if labeled else []


def load_features(info: DatasetInfo, storage_options: StorageOptions = None) -> Feature:
    """The connector tree of a dataset, ClassLabel names read from its ``*.labels.txt`` files.

    Raises:
        TFDSFormatError: the directory has no ``features.json``.
        UnsupportedFeatureError: a connector that is not read here, named.
    """
    if info.features_json is None:
        raise TFDSFormatError(f"{info.path!r} has no features.json: its features cannot be known")
    bare = parse_features(info.features_json)
    labels = {}
    for path in _class_label_paths(bare):
        names = read_lines(info.label_file(path), storage_options)
        if names is not None:
            labels[path] = tuple(names)
    return parse_features(info.features_json, labels) if labels else bare


def split_files(
    info: DatasetInfo,
    split: str,
    index: IndexArg = None,
    storage_options: StorageOptions = None,
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
) -> RecordFiles:
    """The records ``split`` selects (``"train[:10%]+test"``), as files to read by record id.

    Each shard's index is read or built as for any dataset (remote shards, which TFDS leaves
    without one, scanned once from their cached copy: see ``cache_dir``), and its record count
    checked against ``shardLengths``; with a manifest of the shards in their folder (``tfrecord-index
    manifest``), from it, each index fetched when its shard is first read.

    Raises:
        TFDSFormatError: a shard holds another number of records than dataset_info.json says.
    """
    lengths = {name: split_info.shard_lengths for name, split_info in info.splits.items()}
    ranges = shard_ranges(parse_split(split, lengths), lengths)
    places: dict[tuple[str, int], int] = {}
    paths: list[str] = []
    for piece in ranges:
        if (piece.split, piece.shard) not in places:
            places[(piece.split, piece.shard)] = len(paths)
            paths.append(info.shard_paths(piece.split)[piece.shard])
    files = RecordFiles(
        resolve_paths(
            paths, index=index, storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit
        )
    )
    for (name, shard), place in places.items():
        expected = info.splits[name].shard_lengths[shard]
        if files.counts[place] != expected:
            raise TFDSFormatError(
                f"{paths[place]!r} holds {files.counts[place]} records, but dataset_info.json says "
                f"{expected} (split {name!r}, shard {shard})"
            )
    return files.keep_ranges([(places[(p.split, p.shard)], p.start, p.stop) for p in ranges])


class TFDSTransform:
    """Decodes TFDS's values from the columns (:class:`FeatureDecoder`), then runs ``transform``."""

    def __init__(self, decoder: FeatureDecoder, transform: Callable[..., Any] | None = None) -> None:
        self.decoder = decoder
        self.transform = transform

    def __call__(self, item: dict[str, Any]) -> Any:
        decoded = self.decoder(item)
        return decoded if self.transform is None else self.transform(decoded)


class _TFDSTransformWithGenerator(TFDSTransform):
    """The same, for a user transform that takes the seeded ``generator=``."""

    def __call__(self, item: dict[str, Any], generator: Any = None) -> Any:  # type: ignore[override]
        assert self.transform is not None
        return self.transform(self.decoder(item), generator=generator)


def _transform(decoder: FeatureDecoder, transform: Callable[..., Any] | None) -> TFDSTransform:
    if transform is not None:
        try:
            takes_generator = "generator" in inspect.signature(transform).parameters
        except (TypeError, ValueError):
            takes_generator = False
        if takes_generator:
            return _TFDSTransformWithGenerator(decoder, transform)
    return TFDSTransform(decoder, transform)


class _TFDSMetadata:
    """What both TFDS datasets keep beside the records (first in their bases: it takes these
    arguments and hands the rest to the dataset)."""

    def __init__(
        self, files: RecordFiles, *, info: DatasetInfo, features: Feature, split: str, **kwargs: Any
    ) -> None:
        super().__init__(files, **kwargs)  # type: ignore[call-arg]
        self.info = info
        self.features = features
        self.split = split

    def _title(self) -> str:
        return f"{self.info.name} {self.info.version} {self.split!r}"


class TFDSDataset(_TFDSMetadata, TFRecordDataset):
    """A :class:`~torch_tfrecord.TFRecordDataset` over a TFDS split, with its metadata.

    Attributes:
        info: the directory's :class:`~torch_tfrecord.integrations.tfds.info.DatasetInfo`.
        features: the connector tree, e.g. ``features["label"].names``.
        split: the split string it reads.
    """

    def __repr__(self) -> str:
        return f"TFDSDataset({self._title()}, {super().__repr__()})"


class IndexedTFDSDataset(_TFDSMetadata, IndexedTFRecordDataset):
    """The map-style twin: an :class:`~torch_tfrecord.IndexedTFRecordDataset` over a TFDS split,
    with the same attributes as :class:`TFDSDataset`."""

    def __repr__(self) -> str:
        return f"IndexedTFDSDataset({self._title()}, {len(self)} records)"


def from_tfds(
    path: str | os.PathLike[str],
    split: str = "train",
    *,
    name: str | None = None,
    indexed: bool = False,
    index: IndexArg = None,
    storage_options: StorageOptions = None,
    cache_dir: CacheDir = None,
    cache_limit: int | str | None = None,
    transform: Callable[..., Any] | None = None,
    dct: DCT = "fast",
    **dataset_kwargs: Any,
) -> TFDSDataset | IndexedTFDSDataset:
    """A TFDS-prepared dataset as a dataset, with no TensorFlow and no spec to write.

    The spec comes from ``features.json``; samples (or batches) are nested dicts keyed as in
    TFDS, values in PyTorch's conventions (images uint8 CHW, ClassLabel int64, Text str,
    Sequences as tensors per sample and :class:`~torch_tfrecord.Ragged` per batch). Record
    counts come from ``dataset_info.json``, checked against each shard's index.

    Args:
        path: a version directory (``~/tensorflow_datasets/mnist/3.0.1``), a dataset directory
            (its latest version), or, with ``name``, the data_dir; local or a URL.
        split: a TFDS split string: ``"train"``, ``"train[:10%]"``, ``"train[100:200]"``,
            ``"train+test"``, ``"all"``.
        name: ``"mnist"``, ``"mnist:3.0.1"`` or ``"coco/2017:1.1.0"`` under ``path``.
        indexed: True gives the map-style :class:`IndexedTFDSDataset`.
        index, storage_options, cache_dir, cache_limit: as for
            :class:`~torch_tfrecord.TFRecordDataset`.
        transform: runs on TFDS's values (a sample, or a batch in batch mode).
        dct: the inverse DCT of JPEG images. ``"fast"`` (the default) is TensorFlow's default,
            so images equal ``tfds.as_numpy``'s value for value (it needs simplejpeg: the
            ``vision`` or ``fastjpeg`` extra); ``"accurate"`` is TensorFlow's
            ``INTEGER_ACCURATE`` (and torchvision's and Pillow's pixels).
        **dataset_kwargs: any other argument of the dataset (``batch_size``, ``shuffle``,
            ``seed``, ``rank`` ...).

    Raises:
        SourceNotFoundError: no such directory, dataset, version or split.
        UnsupportedFeatureError: a feature connector that is not read here, named.
        TFDSFormatError: metadata that cannot be read, or shards that disagree with it.

    Example:
        >>> ds = tt.tfds.from_tfds("~/tensorflow_datasets", "train[:10%]", name="mnist")  # doctest: +SKIP
        >>> ds.features["label"].names[:3]  # doctest: +SKIP
        ['0', '1', '2']
    """
    version_dir = resolve_version_dir(os.path.expanduser(os.fspath(path)), name, storage_options)
    info = read_info(version_dir, storage_options)
    features = load_features(info, storage_options)
    batched = not indexed and dataset_kwargs.get("batch_size") is not None
    decoder = FeatureDecoder(features, batched=batched, dct=dct)
    files = split_files(info, split, index, storage_options, cache_dir, cache_limit)
    kwargs = {"spec": decoder.spec, "transform": _transform(decoder, transform), **dataset_kwargs}
    if indexed:
        return IndexedTFDSDataset(files, info=info, features=features, split=split, **kwargs)
    return TFDSDataset(files, info=info, features=features, split=split, **kwargs)
