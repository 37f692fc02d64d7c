"""Training frameworks' wrappers around a DataLoader, recognised from inside the dataset.

Accelerate (and transformers.Trainer, which prepares its loaders with Accelerate) wraps the
loader of any IterableDataset, written for datasets that do not split themselves over ranks:

- ``DataLoaderDispatcher`` (its default for an IterableDataset): only rank 0 iterates the loader;
  it takes ``world_size`` batches at a time, concatenates them and sends rank r the r-th slice.
- ``IterableDatasetShard`` (with ``dispatch_batches=False``): every rank iterates the dataset and
  keeps, of each ``world_size x batch_size`` samples, its own ``batch_size``.

Either would cut a dataset that already reads only its rank's share: half the records of two
ranks lost, with no error. The dataset finds these wrappers among its callers (by class and
module name, in :mod:`.internals`: nothing imports a framework) and adapts (see
:mod:`.wrapped`); what it cannot serve exactly raises an error that names the fix. Versions
of the frameworks other than those whose wrappers were read get a warning, as a wrapper of
theirs might not be recognised: the known ones are those the compatibility matrix ran green.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import sys
import warnings
from typing import Literal

import torch

from ...support.tested_versions import MAJORS

__all__ = ["DISPATCHED_STATE", "KNOWN_MAJORS", "DispatchFlag", "Wrapper", "warn_unknown_versions"]

KNOWN_MAJORS: dict[str, tuple[str, tuple[int, ...]]] = {
    # module: (distribution, the major versions the compatibility matrix ran green: .ci/compat.py
    # writes them into support/tested_versions.py; pytorch-lightning is released with lightning)
    "accelerate": ("accelerate", MAJORS["accelerate"]),
    "transformers": ("transformers", MAJORS["transformers"]),
    "lightning": ("lightning", MAJORS["lightning"]),
    "pytorch_lightning": ("pytorch-lightning", MAJORS["lightning"]),
    "torchdata": ("torchdata", MAJORS["torchdata"]),
}
_warned: set[str] = set()
DISPATCHED_STATE = (
    "under Accelerate's DataLoaderDispatcher rank 0 reads for every rank, and the dataset keeps no "
    "place of its own: resume with Accelerator.load_state and accelerator.skip_first_batches "
    "(without DataLoaderConfiguration(use_stateful_dataloader=True)); see docs/guides/frameworks.md"
)


@dataclasses.dataclass(frozen=True)
class Wrapper:
    """A framework's wrapper found among the dataset's callers.

    Attributes:
        kind: ``"dispatcher"`` (Accelerate's DataLoaderDispatcher) or ``"shard"``
            (Accelerate's IterableDatasetShard).
        num_processes, process_index: the world the wrapper splits for.
        run: samples the wrapper keeps for this rank at once (``"shard"``), else 1.
        split_batches: the wrapper splits one batch over the ranks instead of batches.
        stateful: the wrapper's loader is torchdata's StatefulDataLoader.
    """

    kind: Literal["dispatcher", "shard"]
    num_processes: int
    process_index: int
    run: int = 1
    split_batches: bool = False
    stateful: bool = False

    def check(self, world_size: int, rank: int, batch_mode: bool) -> None:
        """Raises where the wrapper cannot give each rank exactly its share.

        Raises:
            ValueError: the wrapper splits for another world, splits batches, (``"shard"``)
                wraps a dataset that makes its own batches, or (``"dispatcher"``) would save
                a place of the dataset's, which it does not keep there.
        """
        name = "DataLoaderDispatcher" if self.kind == "dispatcher" else "IterableDatasetShard"
        if (self.num_processes, self.process_index) != (world_size, rank):
            raise ValueError(
                f"Accelerate's {name} splits the data for process {self.process_index} of "
                f"{self.num_processes}, but the dataset is rank {rank} of {world_size} "
                "(give the dataset rank= and world_size= of its data-parallel group)"
            )
        if self.split_batches:
            raise ValueError(
                f"Accelerate's {name} with split_batches=True would cut the dataset's batches across "
                "ranks; the dataset already gives each rank its own: use split_batches=False "
                "(DataLoaderConfiguration(split_batches=False))"
            )
        if self.kind == "dispatcher" and self.stateful and world_size > 1:
            raise ValueError(DISPATCHED_STATE)
        if self.kind == "shard" and batch_mode:
            raise ValueError(
                "Accelerate's IterableDatasetShard (dispatch_batches=False) cannot wrap a dataset that "
                "makes its own batches: use dispatch_batches=None (the default) or give the "
                "dataset no batch_size and the DataLoader batch_size=B"
            )


class DispatchFlag:
    """Whether Accelerate's DataLoaderDispatcher serves the dataset: shared with its workers.

    The dispatcher's ``set_epoch`` and ``len`` call the dataset in the main process before its
    workers start; the workers, which cannot see the dispatcher among their callers, read it here.
    It stays set until a ``set_epoch`` comes from elsewhere: a dataset once given to a dispatcher
    is best not iterated by other loaders without one.
    """

    def __init__(self) -> None:
        self.value = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    def get(self) -> bool:
        return bool(self.value[0])

    def note(self, wrapper: Wrapper | None, *, clear: bool = False) -> None:
        """Sets the flag when ``wrapper`` is a dispatcher; with ``clear``, clears it otherwise (a
        ``set_epoch`` from anything but a dispatcher: the dataset is no longer served by one)."""
        if wrapper is not None and wrapper.kind == "dispatcher":
            self.value[0] = 1
        elif clear:
            self.value[0] = 0


def warn_unknown_versions() -> None:
    """Warns once for each loaded framework whose major version's wrappers were never read here."""
    for module, (distribution, majors) in KNOWN_MAJORS.items():
        if module not in sys.modules or module in _warned:
            continue
        _warned.add(module)
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        major = version.split(".", 1)[0]
        if not major.isdigit() or int(major) not in majors:
            warnings.warn(
                f"{distribution} {version} is a version whose data loader wrappers torch_tfrecord does "
                f"not know (it knows {', '.join(f'{m}.x' for m in majors)}): check that each epoch "
                'reads every record once (the "_record_id" of each sample), or pin '
                f"{distribution} to a known version",
                UserWarning,
                stacklevel=3,
            )
