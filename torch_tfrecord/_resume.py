"""Saved places in an epoch: the state dict format, its checks, and reading StatefulDataLoader states."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .order import Progress, WorkerSlice, merge_progress

__all__ = ["Resume", "decode_state", "encode_state", "merge_loader_state"]

FORMAT = "torch_tfrecord.TFRecordDataset/1"


@dataclasses.dataclass(frozen=True)
class Resume:
    """A place to resume from: the rank's progress, or one worker's (its slice and units handed out)."""

    epoch: int
    progress: Progress
    workers: WorkerSlice | None = None
    yielded: int = 0


def encode_state(
    identity: Mapping[str, Any], epoch: int, progress: Progress, workers: WorkerSlice | None, yielded: int
) -> dict[str, Any]:
    """A state dict of plain Python values (safe for torch.save and JSON)."""
    state: dict[str, Any] = {
        "format": FORMAT,
        **identity,
        "epoch": epoch,
        "start": progress.start,
        "done": list(progress.done),
    }
    if workers is not None:
        state["worker"] = {
            "num_workers": workers.num_workers,
            "worker_id": workers.worker_id,
            "chunk": workers.chunk,
            "yielded": yielded,
        }
    return state


def decode_state(state: Mapping[str, Any], identity: Mapping[str, Any]) -> Resume:
    """Checks a state against the dataset that loads it and returns the place it names.

    Raises:
        ValueError: not a state of this format, or saved from another dataset or configuration.
    """
    if state.get("format") != FORMAT:
        raise ValueError(f"not a TFRecordDataset state (format {state.get('format')!r}, expected {FORMAT!r})")
    for key, expected in identity.items():
        found = state.get(key)
        if found != expected:
            what = "data (files, sizes or record counts)" if key == "fingerprint" else key
            raise ValueError(
                f"cannot resume: the state was saved with {what} {found!r}, this dataset has {expected!r}"
            )
    try:
        progress = Progress(int(state["start"]), tuple(int(d) for d in state["done"]))
        worker = state.get("worker")
        if worker is None:
            return Resume(int(state["epoch"]), progress)
        workers = WorkerSlice(int(worker["num_workers"]), int(worker["worker_id"]), int(worker["chunk"]))
        return Resume(int(state["epoch"]), progress, workers, int(worker["yielded"]))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed TFRecordDataset state ({type(error).__name__}: {error})") from None


def merge_loader_state(state: Mapping[str, Any], total_units: int) -> dict[str, Any]:
    """The rank's state inside a torchdata StatefulDataLoader ``state_dict()``.

    With workers, each worker's saved place is merged into one, so the loader's state resumes
    with any number of workers.

    Raises:
        ValueError: the loader state holds no dataset state, or was taken between snapshots.
    """
    if "dataset_state" in state:  # num_workers=0: the dataset's own state
        inner = state["dataset_state"]
        if inner is None:
            raise ValueError("the loader state holds no dataset state")
        return dict(inner)
    if state.get("_steps_since_snapshot", 0):
        raise ValueError(
            "the StatefulDataLoader state was taken between worker snapshots; use "
            "snapshot_every_n_steps=1 to resume it here, or load it into the same StatefulDataLoader"
        )
    try:
        snapshots = state["_snapshot"]["_worker_snapshots"]
        worker_states = [snapshots[f"worker_{i}"]["dataset_state"] for i in range(len(snapshots))]
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed StatefulDataLoader state: no {error} in it") from None
    if not worker_states or any(s is None for s in worker_states):
        raise ValueError("the loader state holds no dataset state for some worker")
    first = worker_states[0]
    slices = [s["worker"] for s in worker_states if "worker" in s]
    if not slices:  # no worker handed anything out yet
        return {key: value for key, value in first.items() if key != "worker"}
    reference = slices[0]
    workers = WorkerSlice(reference["num_workers"], 0, reference["chunk"])
    yielded = [s["worker"]["yielded"] if "worker" in s else 0 for s in worker_states]
    base = Progress(int(first["start"]), tuple(int(d) for d in first["done"]))
    merged = merge_progress(base, total_units, workers, yielded)
    result = {key: value for key, value in first.items() if key != "worker"}
    result.update(start=merged.start, done=list(merged.done))
    return result
