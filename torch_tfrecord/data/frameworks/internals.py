"""Everything this library reads or patches of torch's and the training frameworks' private internals.

Nowhere else in the package looks at another library's private classes, frames or attributes:

- torch's DataLoader *fetcher* (``torch.utils.data._utils.fetch._IterableDatasetFetcher``). A
  DataLoader calls ``iter(dataset)`` from the fetcher it creates (in the main process, or in each
  worker); the dataset looks among its callers for it to learn whether the loader batches
  (``auto_collation``), with which ``collate_fn``, and, from the frame of its
  ``fetch(possibly_batched_index)``, the loader's batch size. It also swaps the fetcher's
  ``default_convert`` for :func:`~torch_tfrecord.data.transport.fast_convert.convert`, which returns
  the same.
- Accelerate's ``DataLoaderDispatcher`` and ``IterableDatasetShard`` (``accelerate.data_loader``),
  recognised among the callers by class and module name (nothing here imports Accelerate), and the
  attributes read of them.
- torch's multi-process DataLoader *iterator* (``_MultiProcessingDataLoaderIter``, or torchdata's
  stateful one): found among the callers while its ``__init__`` starts the workers, its
  ``_next_data`` (which ``__next__`` calls) is timed for the load telemetry (:mod:`..telemetry.shared`),
  its ``_num_yielded`` says a pass's first batch. :func:`next_data_found` checks them.

:func:`contract` says which of these are found in the running versions; tests/test_internals.py
checks it on every stack of the compatibility matrix. When one is not found at run time, nothing
changes silently: the loader's batch size, the one thing whose loss would break a promise (equal
batches across ranks in sample mode with workers), is then asked for with one warning that names
the public way, ``loader_batch_size=`` (:func:`~torch_tfrecord.data.loader.loader` sets it).
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator, Sized
from types import FrameType
from typing import Any

from .detect import Wrapper

__all__ = [
    "LoaderView",
    "calling_loader",
    "calling_wrapper",
    "check_loader_batch_size",
    "contract",
    "loader_starting",
    "next_data_found",
    "time_batches",
    "use_fast_convert",
    "warn_batch_size_unknown",
    "wrapper_of",
]

_ACCELERATE = "accelerate.data_loader"
_warned: set[str] = set()


def _fetcher_class() -> type | None:
    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:
        return None
    return _IterableDatasetFetcher  # type: ignore[no-any-return]


@dataclasses.dataclass(frozen=True)
class LoaderView:
    """What the dataset sees of the DataLoader iterating it.

    Attributes:
        fetcher: the DataLoader's fetcher that called ``iter(dataset)``, None when none was found
            (no DataLoader, or torch's fetcher changed: see ``internals_found``).
        batch_size: the loader's batch size (None: it does not batch, or it is unknown).
        internals_found: whether torch's fetcher class exists as this module reads it.
    """

    fetcher: Any = None
    batch_size: int | None = None
    internals_found: bool = True


def calling_loader(depth: int = 6) -> LoaderView:
    """The DataLoader fetcher among the ``depth`` frames above the caller's caller (a dataset's
    ``__iter__``, or a generator at its first step), with the loader's batch size.

    A fetcher asks for one batch's indices at a time (``fetch(possibly_batched_index)``), and its
    batches are always full until the data ends, so its first request gives the batch size.
    """
    fetcher_class = _fetcher_class()
    if fetcher_class is None:
        return LoaderView(internals_found=False)
    found: Any = None
    for frame, fetcher in _fetcher_frames(fetcher_class, depth):
        found = fetcher
        if frame.f_code.co_name == "fetch":
            index = frame.f_locals.get("possibly_batched_index")
            if not getattr(fetcher, "auto_collation", False) or not isinstance(index, Sized):
                return LoaderView(fetcher)
            return LoaderView(fetcher, len(index) or None)
    return LoaderView(found)


def _fetcher_frames(fetcher_class: type, depth: int) -> Iterator[tuple[FrameType, Any]]:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, fetcher_class):
            yield frame, candidate
        frame = frame.f_back


def use_fast_convert(fetcher: Any, convert: Callable[[Any], Any]) -> None:
    """Makes ``fetcher`` convert with ``convert``
    (:func:`~torch_tfrecord.data.transport.fast_convert.convert`) where it would use
    ``default_convert`` (a DataLoader with ``batch_size=None`` and no ``collate_fn`` of the user's)."""
    from torch.utils.data import default_convert

    if fetcher is None or getattr(fetcher, "auto_collation", True):
        return
    if getattr(fetcher, "collate_fn", None) is default_convert:
        fetcher.collate_fn = convert


def warn_batch_size_unknown(view: LoaderView) -> None:
    """Warns once that a sample-mode dataset in a DataLoader worker cannot learn the loader's batch size.

    Workers then take runs of 64 samples: every rank still reads each of its records once, but
    the loader's last batches may differ in number from rank to rank.
    """
    key = "found" if view.internals_found else "missing"
    if key in _warned:
        return
    _warned.add(key)
    why = (
        "torch's DataLoader fetcher (torch.utils.data._utils.fetch._IterableDatasetFetcher) is not where "
        "this version of torch_tfrecord reads it"
        if not view.internals_found
        else "no DataLoader fetcher was found among the callers of iter(dataset)"
    )
    warnings.warn(
        f"the dataset cannot learn the DataLoader's batch size ({why}), so equal batches across ranks "
        "cannot be guaranteed in sample mode with workers: give the dataset loader_batch_size=B (the "
        "DataLoader's batch_size), or build the loader with tt.loader(dataset, batch_size=B, ...)",
        UserWarning,
        stacklevel=4,
    )


def calling_wrapper(depth: int = 8) -> Wrapper | None:
    """The Accelerate wrapper among the ``depth`` frames above the caller, if any."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        found = wrapper_of(frame.f_locals.get("self"))
        if found is not None:
            return found
        frame = frame.f_back
    return None


def wrapper_of(candidate: Any) -> Wrapper | None:
    """``candidate`` as a :class:`~torch_tfrecord.data.frameworks.detect.Wrapper`, or None when it
    is not one."""
    if candidate is None:
        return None
    cls = type(candidate)  # not .__class__: Accelerate's loaders claim to be DataLoaders there
    if not cls.__module__.startswith("accelerate."):
        return None
    # getattr with defaults: a wrapper still being built (Accelerate asks its loader for a state
    # before it sets its own attributes) has none of them yet, and is not iterating.
    if cls.__name__ == "DataLoaderDispatcher":
        state = getattr(candidate, "state", None)
        if state is None:
            return None
        return Wrapper(
            "dispatcher",
            int(state.num_processes),
            int(state.process_index),
            split_batches=bool(getattr(candidate, "split_batches", False)),
            stateful=bool(getattr(candidate, "use_stateful_dataloader", False)),
        )
    if cls.__name__ == "IterableDatasetShard":
        num_processes = getattr(candidate, "num_processes", None)
        if num_processes is None:
            return None
        return Wrapper(
            "shard",
            int(num_processes),
            int(candidate.process_index),
            run=int(candidate.batch_size or 1),
            split_batches=bool(candidate.split_batches),
        )
    return None


def loader_starting(depth: int = 16) -> tuple[Any, Any] | None:
    """The multi-process DataLoader iterator starting its workers among the callers (in its
    ``__init__``: at a worker's fork, or as a spawned worker's dataset is pickled), with its
    dataset; None when there is none."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code.co_name == "__init__":
            candidate: Any = frame.f_locals.get("self")
            if type(candidate).__name__.endswith(_ITERATOR) and hasattr(candidate, "_dataset"):
                return candidate, candidate._dataset
        frame = frame.f_back
    return None


_ITERATOR = "MultiProcessingDataLoaderIter"
Fetch = Callable[[Callable[[Any], Any], Any, bool], Any]


class _Timed:
    """An iterator's ``_next_data`` that goes through ``fetch(next_data, iterator, first)``. It
    holds the iterator weakly: the iterator ends its workers when it is collected, so nothing may
    keep it alive in a cycle."""

    __slots__ = ("fetch", "function", "iterator")

    def __init__(self, iterator: Any, function: Callable[[Any], Any], fetch: Fetch) -> None:
        self.iterator = weakref.ref(iterator)
        self.function = function
        self.fetch = fetch

    def __call__(self) -> Any:
        iterator = self.iterator()
        return self.fetch(self.function, iterator, getattr(iterator, "_num_yielded", -1) == 0)


def time_batches(iterator: Any, fetch: Fetch) -> bool:
    """Makes each ``next()`` of a DataLoader iterator call ``fetch(next_data, iterator, first)``
    (``first``: the pass's first batch), which returns ``next_data(iterator)``; False when the
    iterator is not as this module reads it, or is timed already."""
    function = getattr(type(iterator), "_next_data", None)
    if not callable(function) or isinstance(vars(iterator).get("_next_data"), _Timed):
        return False
    iterator._next_data = _Timed(iterator, function, fetch)
    return True


def next_data_found() -> bool:
    """Whether torch's DataLoader iterators are as :func:`time_batches` and :func:`loader_starting`
    read them: ``__next__`` calls ``self._next_data()``, and the multi-process iterator starts its
    workers in ``__init__``, keeps ``_dataset`` and counts ``_num_yielded``."""
    import inspect

    try:
        from torch.utils.data import dataloader
    except ImportError:
        return False
    base = getattr(dataloader, "_BaseDataLoaderIter", None)
    multi = getattr(dataloader, "_MultiProcessingDataLoaderIter", None)
    if base is None or multi is None or not callable(getattr(multi, "_next_data", None)):
        return False
    try:
        sources = inspect.getsource(base) + inspect.getsource(multi)
    except (OSError, TypeError):
        return False
    return all(
        text in sources for text in ("self._next_data()", "self._num_yielded = 0", "self._dataset = ")
    ) and "w.start()" in inspect.getsource(multi.__init__)


def contract() -> dict[str, bool]:
    """Which private internals this module reads are present in the running versions.

    Keys: ``"torch_fetcher"`` (the fetcher class, whose ``fetch`` takes ``possibly_batched_index``);
    and, when Accelerate is installed, ``"accelerate_dispatcher"`` and ``"accelerate_shard"`` (the
    classes, in ``accelerate.data_loader``). That the frames and attributes are where this module
    reads them is checked by running real loaders (tests/test_internals.py).
    """
    import importlib
    import inspect

    fetcher = _fetcher_class()
    fetch = getattr(fetcher, "fetch", None)
    found = {
        "torch_fetcher": callable(fetch) and "possibly_batched_index" in inspect.signature(fetch).parameters
    }
    try:
        module = importlib.import_module(_ACCELERATE)
    except ImportError:
        return found
    found["accelerate_dispatcher"] = isinstance(getattr(module, "DataLoaderDispatcher", None), type)
    found["accelerate_shard"] = isinstance(getattr(module, "IterableDatasetShard", None), type)
    return found


def check_loader_batch_size(loader_batch_size: int | None, batch_size: int | None) -> int | None:
    """A dataset's ``loader_batch_size`` checked against its own ``batch_size``."""
    if loader_batch_size is None:
        return None
    if isinstance(loader_batch_size, bool) or not isinstance(loader_batch_size, int) or loader_batch_size < 1:
        raise ValueError(f"{loader_batch_size=} must be a positive int (the DataLoader's batch_size)")
    if batch_size is not None:
        raise ValueError(
            "loader_batch_size= is for a dataset of samples batched by the DataLoader; this dataset "
            f"makes batches of {batch_size} itself (use DataLoader(dataset, batch_size=None))"
        )
    return loader_batch_size
