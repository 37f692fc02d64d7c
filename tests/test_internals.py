"""Contract tests of the private internals torch_tfrecord.data.frameworks.internals reads (torch's DataLoader
fetcher, Accelerate's wrappers): real loaders over a probe dataset that records what the module
finds. They run in every stack of the compatibility matrix (.ci/compat.py), so a torch or
Accelerate release that moves or changes one of them fails here, by name, rather than quietly
losing a promise; and when one is missing at run time, the dataset says so once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, default_convert, get_worker_info

import torch_tfrecord as tt
from torch_tfrecord.data.frameworks import internals
from torch_tfrecord.data.frameworks.detect import Wrapper
from torch_tfrecord.data.transport import fast_convert

B = 4
N = 24


class Probe(IterableDataset[dict[str, int]]):
    """Yields ``{"i": ...}`` samples with what internals found: in ``__iter__`` (the fetcher, and
    whether its default_convert was swapped for the fast convert) and at the generator's first
    step, inside the fetcher's ``fetch`` (the loader's batch size). Wrappers found by
    ``__iter__`` and ``__len__`` in the main process are kept in ``wrappers``."""

    def __init__(self) -> None:
        self.wrappers: list[tuple[str, Wrapper | None]] = []

    def __len__(self) -> int:
        self.wrappers.append(("len", internals.calling_wrapper()))
        return N

    def __iter__(self) -> Iterator[dict[str, int]]:
        view = internals.calling_loader()
        self.wrappers.append(("iter", internals.calling_wrapper()))
        fetcher = view.fetcher
        found = {
            "fetcher": int(fetcher is not None),
            "auto_collation": int(bool(getattr(fetcher, "auto_collation", False))),
            "default_convert": int(getattr(fetcher, "collate_fn", None) is default_convert),
        }
        internals.use_fast_convert(fetcher, fast_convert.convert)
        found["fast_convert"] = int(getattr(fetcher, "collate_fn", None) is fast_convert.convert)
        return self._samples(found)

    def _samples(self, found: dict[str, int]) -> Iterator[dict[str, int]]:
        batch_size = internals.calling_loader().batch_size  # the first step runs inside fetch()
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        for i in range(worker, N, workers):
            yield {"i": i, **found, "batch_size": batch_size or 0}


def _samples(loader: DataLoader[Any]) -> list[dict[str, int]]:
    """Every sample the loader yields, unbatched, with plain int values."""
    samples = []
    for item in loader:
        if isinstance(item["i"], torch.Tensor) and item["i"].dim() == 1:
            samples += [{k: int(v[j]) for k, v in item.items()} for j in range(len(item["i"]))]
        else:
            samples.append({k: int(v) for k, v in item.items()})
    return samples


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [B, None])
def test_the_fetcher_its_batch_size_and_its_convert_are_where_internals_reads_them(
    workers: int, batch_size: int | None
) -> None:
    loader = DataLoader(Probe(), batch_size=batch_size, num_workers=workers)
    samples = _samples(loader)
    assert sorted(s["i"] for s in samples) == list(range(N))
    for sample in samples:
        assert sample["fetcher"] == 1, "torch's fetcher not found among the callers of iter(dataset)"
        assert sample["auto_collation"] == int(batch_size is not None)
        assert sample["batch_size"] == (batch_size or 0), "the batch size is not in fetch()'s frame"
        # the fast convert goes in exactly where the loader would use default_convert
        assert sample["default_convert"] == int(batch_size is None)
        assert sample["fast_convert"] == int(batch_size is None)


def test_the_contract_holds_in_this_stack() -> None:
    found = internals.contract()
    assert found.pop("torch_fetcher"), "torch.utils.data._utils.fetch._IterableDatasetFetcher.fetch moved"
    try:
        import accelerate  # noqa: F401
    except ImportError:
        assert not found
    else:
        assert found == {"accelerate_dispatcher": True, "accelerate_shard": True}


@pytest.fixture
def accelerate_state() -> Iterator[None]:
    pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState, GradientState

    yield
    AcceleratorState._reset_state(True)  # the next Accelerator of this process starts afresh
    GradientState._reset_state()


@pytest.mark.usefixtures("accelerate_state")
def test_accelerates_default_dispatcher_is_recognised_with_its_world() -> None:
    from accelerate import Accelerator

    probe = Probe()
    loader = Accelerator(cpu=True).prepare(DataLoader(probe, batch_size=B))
    assert type(loader).__name__ == "DataLoaderDispatcher"
    assert len(loader) == N // B
    assert sorted(s["i"] for s in _samples(loader)) == list(range(N))
    dispatcher = Wrapper("dispatcher", 1, 0, split_batches=False, stateful=False)
    assert ("len", dispatcher) in probe.wrappers
    assert ("iter", dispatcher) in probe.wrappers
    assert all(found == dispatcher for _, found in probe.wrappers)


@pytest.mark.usefixtures("accelerate_state")
def test_accelerate_without_dispatch_in_one_process_leaves_the_dataset_alone() -> None:
    from accelerate import Accelerator, DataLoaderConfiguration

    probe = Probe()
    config = DataLoaderConfiguration(dispatch_batches=False)
    loader = Accelerator(cpu=True, dataloader_config=config).prepare(DataLoader(probe, batch_size=B))
    assert sorted(s["i"] for s in _samples(loader)) == list(range(N))
    assert ("iter", None) in probe.wrappers
    assert all(found is None for _, found in probe.wrappers)


@pytest.mark.usefixtures("accelerate_state")
def test_accelerates_iterable_dataset_shard_is_recognised_with_its_world_and_run() -> None:
    from accelerate.data_loader import prepare_data_loader

    probe = Probe()
    loader = prepare_data_loader(
        DataLoader(probe, batch_size=B), num_processes=2, process_index=1, put_on_device=False,
        dispatch_batches=False,
    )  # fmt: skip
    assert type(loader.dataset).__name__ == "IterableDatasetShard"
    kept = [s["i"] for s in _samples(loader)]
    assert kept == [i for i in range(N) if (i // B) % 2 == 1]  # process 1's runs of B
    assert ("iter", Wrapper("shard", 2, 1, run=B, split_batches=False)) in probe.wrappers


def _record_warnings(path: Path) -> Callable[[int], None]:
    def init(worker_id: int) -> None:
        def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            with path.open("a") as out:
                out.write(f"{category.__name__}: {message}\n".replace("\n", " ") + "\n")

        warnings.simplefilter("always")  # every warnings.warn call is seen: "once" is the dataset's
        warnings.showwarning = show

    return init


def test_a_missing_fetcher_warns_once_and_changes_nothing_silently(
    id_shards: Callable[..., list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = id_shards([7, 5, 9])
    monkeypatch.setattr(internals, "_fetcher_class", lambda: None)  # a torch that moved it
    assert internals.calling_loader() == internals.LoaderView(internals_found=False)
    log = tmp_path / "warnings.txt"
    dataset = tt.TFRecordDataset(paths, spec={"id": tt.FixedLen([], torch.int64)}, shuffle=False)
    loader = DataLoader(
        dataset, batch_size=B, num_workers=1, persistent_workers=True, multiprocessing_context="fork",
        worker_init_fn=_record_warnings(log),
    )  # fmt: skip
    for _epoch in range(2):
        ids = sorted(int(i) for batch in loader for i in batch["id"])
        assert ids == list(range(21))  # every record still read once
    found = [line for line in log.read_text().splitlines() if "DataLoader's batch size" in line]
    assert len(found) == 1, found  # once, in the one worker, over both epochs
    assert "equal batches across ranks cannot be guaranteed" in found[0]
    assert "loader_batch_size" in found[0]
    assert "_IterableDatasetFetcher" in found[0]


def test_loader_batch_size_needs_no_internals(
    id_shards: Callable[..., list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = id_shards([7, 5, 9])
    monkeypatch.setattr(internals, "_fetcher_class", lambda: None)
    log = tmp_path / "warnings.txt"
    spec = {"id": tt.FixedLen([], torch.int64)}
    dataset = tt.TFRecordDataset(paths, spec=spec, shuffle=False, loader_batch_size=B)
    init = _record_warnings(log)
    loader = DataLoader(dataset, batch_size=B,
                        num_workers=2, multiprocessing_context="fork", worker_init_fn=init)
    assert sorted(int(i) for batch in loader for i in batch["id"]) == list(range(21))
    assert not log.exists() or "batch size" not in log.read_text()
