"""``tt.loader``: a DataLoader built for one of our datasets, told its batch size the public way.

A dataset of samples learns the DataLoader's batch size (so that each worker reads whole loader
batches and every rank gets as many) from torch's private fetcher (:mod:`.frameworks.internals`); this
builds the loader and gives the dataset ``loader_batch_size`` instead, so nothing depends on
torch's internals. It also picks what each mode needs: ``batch_size=None`` for a dataset that
makes its own batches, :func:`~torch_tfrecord.data.transport.collate.collate` for one of samples.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from .epoch.driver import EpochDataset
from .transport.collate import collate

__all__ = ["loader"]


def loader(
    dataset: EpochDataset, batch_size: int | None = None, *, process: bool = False, **options: Any
) -> DataLoader[Any]:
    """A ``torch.utils.data.DataLoader`` over ``dataset`` that keeps its promises without reading
    torch's internals.

    Args:
        dataset: a :class:`~torch_tfrecord.TFRecordDataset`, :class:`~torch_tfrecord.MixedDataset` or
            another dataset of ours.
        batch_size: for a dataset of samples, the loader's batch size (given to the dataset as
            ``loader_batch_size``); for a dataset that makes batches, None (the default).
        process: the dataset's loading (its ``threads``, or its prefetch thread) runs in one
            process of its own (the dataset's ``process=True``); with ``num_workers=0`` only.
        **options: the rest of DataLoader's arguments (``num_workers``, ``persistent_workers``,
            ``pin_memory`` ...); ``collate_fn`` defaults to :func:`tt.collate` for samples.

    Raises:
        ValueError: a ``batch_size`` for a dataset that makes its own batches, none for one of
            samples, a ``loader_batch_size`` the dataset was given that differs, or ``process``
            with workers.

    Example:
        >>> ds = tt.TFRecordDataset("train-*.tfrecord", spec={"label": "int"})  # doctest: +SKIP
        >>> for batch in tt.loader(ds, batch_size=32, num_workers=4): ...  # doctest: +SKIP
    """
    if not isinstance(dataset, EpochDataset):
        raise TypeError(f"tt.loader takes a dataset of torch_tfrecord, not a {type(dataset).__name__}")
    if process:
        if options.get("num_workers"):
            raise ValueError(
                "process=True loads in one process of its own, in place of workers: give num_workers=0"
            )
        dataset.process = True
    if dataset.plan.batch_size is not None:
        if batch_size is not None:
            raise ValueError(
                f"the dataset makes batches of {dataset.plan.batch_size} itself: call tt.loader(dataset) "
                "without batch_size"
            )
        return DataLoader(dataset, batch_size=None, **options)
    if batch_size is None:
        raise ValueError(
            "a dataset of samples needs the loader's batch_size: tt.loader(dataset, batch_size=B)"
        )
    if dataset.loader_batch_size not in (None, batch_size):
        raise ValueError(
            f"the dataset was given loader_batch_size={dataset.loader_batch_size}, "
            f"the loader batch_size={batch_size}: give both the same"
        )
    dataset.loader_batch_size = batch_size
    options.setdefault("collate_fn", collate)
    return DataLoader(dataset, batch_size=batch_size, **options)
