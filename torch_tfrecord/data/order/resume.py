"""Saved places in an epoch: the state dict format, its checks, and reading StatefulDataLoader states.

A rank's state names its place in its share of an epoch. The states of all ranks together
combine into one *global* state that names what is left of the epoch as ranges of its positions;
that one resumes on any number of ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .plan import EpochPlan, Progress, Ranges, WorkerSlice, check_ranges, merge_progress, rest_of_epoch

__all__ = [
    "PORTABLE_KEYS",
    "Live",
    "Resume",
    "combine_states",
    "decode_state",
    "encode_state",
    "is_loader_state",
    "load_state",
    "map_dataset_states",
    "merge_loader_state",
    "rank_state",
    "resume_point",
    "wrapped_splits",
]

FORMAT = "torch_tfrecord.TFRecordDataset/1"
# What a global state must share with the dataset that loads it; the rest of the identity
# (world size, rank, batch size, drop_last) is how the epoch was split, which a global state is not.
PORTABLE_KEYS = ("num_records", "seed", "shuffle", "samples_per_epoch", "fingerprint")
_SPLIT_KEYS = ("world_size", "rank", "batch_size", "drop_last")
_RANK_KEYS = (*PORTABLE_KEYS[:3], *_SPLIT_KEYS, *PORTABLE_KEYS[3:])  # the most telling difference first
_LOCKSTEP_KEYS = tuple(key for key in _RANK_KEYS if key != "rank")


@dataclasses.dataclass(frozen=True)
class Resume:
    """A place to resume from: the rank's progress, or one worker's (its slice and units handed out).

    ``rest`` (positions of the epoch still to read, None for all of them) narrows the epoch the
    progress counts in.
    """

    epoch: int
    progress: Progress
    workers: WorkerSlice | None = None
    yielded: int = 0
    rest: Ranges | None = None


def encode_state(
    identity: Mapping[str, Any],
    epoch: int,
    progress: Progress,
    workers: WorkerSlice | None,
    yielded: int,
    rest: Ranges | None = None,
) -> dict[str, Any]:
    """A state dict of plain Python values (safe for torch.save and JSON)."""
    state: dict[str, Any] = {
        "format": FORMAT,
        **identity,
        "epoch": epoch,
        "start": progress.start,
        "done": list(progress.done),
    }
    if rest is not None:
        state["rest"] = [list(pair) for pair in rest]
    if workers is not None:
        state["worker"] = {
            "num_workers": workers.num_workers,
            "worker_id": workers.worker_id,
            "chunk": workers.chunk,
            "yielded": yielded,
        }
    return state


def _is_global(state: Mapping[str, Any]) -> bool:
    return "rank" not in state and "rest" in state


def _check_format(state: Mapping[str, Any]) -> None:
    if not isinstance(state, Mapping) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"not a TFRecordDataset state (format {found!r}, expected {FORMAT!r})")


def _check_identity(state: Mapping[str, Any], identity: Mapping[str, Any], keys: Sequence[str]) -> None:
    for key in keys:
        expected, found = identity[key], state.get(key)
        if found != expected:
            what = "data (files, sizes, record counts or selection)" if key == "fingerprint" else key
            hint = ""
            if key in ("world_size", "rank"):
                hint = (
                    "; to resume on another number of ranks, load the states of all ranks together "
                    "(a list of every rank's state_dict(), or state_dict(gather=True))"
                )
            raise ValueError(
                f"cannot resume: the state was saved with {what} {found!r}, "
                f"this dataset has {expected!r}{hint}"
            )


def decode_state(state: Mapping[str, Any], identity: Mapping[str, Any], epoch_size: int) -> Resume:
    """Checks a rank's or a global state against the dataset that loads it; returns the place it names.

    Raises:
        ValueError: not a state of this format, or saved from another dataset or configuration.
    """
    _check_format(state)
    global_ = _is_global(state)
    # Not the rank: the ranks of a job take the same number of units in step (their shares are
    # equal), so one rank's place is every rank's place in its own share. Lightning and
    # Accelerate save one rank's loader state for all ranks.
    _check_identity(state, identity, PORTABLE_KEYS if global_ else _LOCKSTEP_KEYS)
    try:
        rest = None if state.get("rest") is None else check_ranges(state["rest"], epoch_size)
        if global_:
            return Resume(int(state["epoch"]), Progress(), rest=rest)
        progress = Progress(int(state["start"]), tuple(int(d) for d in state["done"]))
        worker = state.get("worker")
        if worker is None:
            return Resume(int(state["epoch"]), progress, rest=rest)
        workers = WorkerSlice(int(worker["num_workers"]), int(worker["worker_id"]), int(worker["chunk"]))
        return Resume(int(state["epoch"]), progress, workers, int(worker["yielded"]), rest)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed TFRecordDataset state ({type(error).__name__}: {error})") from None


def is_loader_state(state: Mapping[str, Any]) -> bool:
    """Whether ``state`` is a torchdata StatefulDataLoader's ``state_dict()`` (not the dataset's)."""
    return "dataset_state" in state or "_snapshot" in state


def map_dataset_states(state: Mapping[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A torchdata StatefulDataLoader ``state_dict()`` with each dataset state in it replaced by
    ``change(dataset_state)`` (None kept): for a dataset whose state wraps another's."""
    result = dict(state)
    if "dataset_state" in state:
        inner = state["dataset_state"]
        result["dataset_state"] = None if inner is None else change(inner)
        return result
    try:
        snapshot = dict(state["_snapshot"])
        workers = {}
        for name, worker in snapshot["_worker_snapshots"].items():
            inner = worker.get("dataset_state")
            workers[name] = {**worker, "dataset_state": None if inner is None else change(inner)}
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"malformed StatefulDataLoader state: no {error} in it") from None
    snapshot["_worker_snapshots"] = workers
    result["_snapshot"] = snapshot
    return result


def wrapped_splits(
    state: Mapping[str, Any] | Sequence[Mapping[str, Any]], format_: str, name: str
) -> tuple[list[Mapping[str, Any]], Any]:
    """For a dataset whose state wraps the split's (``{"format": format_, ..., "split": ...}``):
    the wrappers found in ``state`` (its own state, a StatefulDataLoader's, or a list of them),
    and the split's state(s) inside, in the same shape (one, or a list).

    Raises:
        ValueError: no state, a state of another format (``name``: the dataset's class), or a
            loader's state that holds no dataset state.
    """
    wrappers: list[Mapping[str, Any]] = []

    def split_of(one: Any) -> Any:
        if not isinstance(one, Mapping) or one.get("format") != format_:
            raise ValueError(f"not a {name} state (expected format {format_!r})")
        wrappers.append(one)
        return one["split"]

    states = [state] if isinstance(state, Mapping) else list(state)
    if not states:
        raise ValueError("no states to load")
    splits = [map_dataset_states(one, split_of) if is_loader_state(one) else split_of(one) for one in states]
    if not wrappers:
        raise ValueError("the loader state holds no dataset state")
    return wrappers, splits[0] if isinstance(state, Mapping) else splits


def merge_loader_state(
    state: Mapping[str, Any], units_of: Callable[[Mapping[str, Any]], int]
) -> dict[str, Any]:
    """The rank's state inside a torchdata StatefulDataLoader ``state_dict()``.

    With workers, each worker's saved place is merged into one, so the loader's state resumes
    with any number of workers.

    Args:
        state: the loader's state.
        units_of: the units per rank of the epoch a dataset state (of any of its workers) is in.

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
    merged = merge_progress(base, units_of(first), workers, yielded)
    result = {key: value for key, value in first.items() if key != "worker"}
    result.update(start=merged.start, done=list(merged.done))
    return result


def combine_states(states: Sequence[Mapping[str, Any]], plan: EpochPlan) -> dict[str, Any]:
    """One global state from the states of all ranks of a job: what is left of their epoch.

    Args:
        states: every rank's state (its ``state_dict()``, or its StatefulDataLoader's), any order.
        plan: the loading dataset's plan (its shards and order; the split is taken from the states).

    Raises:
        ValueError: states missing, repeated or from different epochs, datasets or configurations.
    """
    if not states:
        raise ValueError("no states to combine")

    def split_plan(state: Mapping[str, Any]) -> EpochPlan:
        try:
            rest = None if state.get("rest") is None else check_ranges(state["rest"], plan.epoch_size)
            return dataclasses.replace(
                plan,
                world_size=int(state["world_size"]),
                rank=0,
                batch_size=state["batch_size"],
                drop_last=bool(state["drop_last"]),
                rest=rest,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"malformed TFRecordDataset state ({type(error).__name__}: {error})") from None

    ranks: dict[int, Mapping[str, Any]] = {}
    for state in states:
        if is_loader_state(state):
            state = merge_loader_state(state, lambda inner: split_plan(inner).units_per_rank)
        _check_format(state)
        if _is_global(state):
            raise ValueError("a global state cannot be combined again; load it as it is")
        if "worker" in state:
            raise ValueError("a state of one DataLoader worker; combine the ranks' loader states instead")
        rank = int(state["rank"])
        if rank in ranks:
            raise ValueError(f"two states of rank {rank}")
        ranks[rank] = state
    first = ranks[min(ranks)]
    world_size = int(first["world_size"])
    if sorted(ranks) != list(range(world_size)):
        missing = sorted(set(range(world_size)) - set(ranks))
        raise ValueError(f"the states of all {world_size} ranks are needed; missing ranks {missing}")
    same = ("epoch", "rest", *(key for key in (*PORTABLE_KEYS, *_SPLIT_KEYS) if key != "rank"))
    for rank, state in ranks.items():
        for key in same:
            if state.get(key) != first.get(key):
                raise ValueError(
                    f"the ranks' states differ: rank {rank} has {key} {state.get(key)!r}, "
                    f"rank {min(ranks)} has {first.get(key)!r}"
                )
    split = split_plan(first)
    progress = [
        Progress(int(ranks[r]["start"]), tuple(int(d) for d in ranks[r]["done"])) for r in range(world_size)
    ]
    rest = rest_of_epoch(split, progress)
    return {
        "format": FORMAT,
        **{key: first.get(key) for key in PORTABLE_KEYS},
        "epoch": int(first["epoch"]),
        "rest": [list(pair) for pair in rest],
    }


@dataclasses.dataclass
class Live:
    """Where a process's current iterator is: its epoch, the progress it started from, its units so far."""

    epoch: int
    progress: Progress
    workers: WorkerSlice
    yielded: int


def resume_point(resume: Resume | None, epoch: int, workers: WorkerSlice) -> tuple[Progress, int]:
    """Where an iteration of ``epoch`` by ``workers`` starts: the rank's progress and units to skip.

    Raises:
        ValueError: the loaded state is one worker's, and this is another worker.
    """
    if resume is None or resume.epoch != epoch:
        return Progress(), 0
    if resume.workers is None:
        return resume.progress, 0
    if resume.workers != workers:
        raise ValueError(
            f"this state was saved by DataLoader worker {resume.workers.worker_id} of "
            f"{resume.workers.num_workers}, but is loaded into worker {workers.worker_id} "
            f"of {workers.num_workers}"
        )
    return resume.progress, resume.yielded


def rank_state(
    plan: EpochPlan,
    identity: Mapping[str, Any],
    epoch: int,
    live: Live | None,
    resume: Resume | None,
    consumed: int | None,
    in_worker: bool,
) -> dict[str, Any]:
    """The state of a rank (or, in a worker, of that worker) for ``state_dict``; see its docstring.

    Args:
        plan: the plan of ``epoch`` (narrowed by a loaded global state).
        live: the process's iterator, if any; resume: the loaded place, if any.
        consumed: units the main process took from a DataLoader since the epoch began, or None.
        in_worker: called in a DataLoader worker.
    """
    resume = resume if resume is not None and resume.epoch == epoch else None
    total = plan.units_per_rank
    workers: WorkerSlice | None = None
    yielded = 0
    if consumed is not None:
        if in_worker:
            raise ValueError("consumed= is for the main process; a worker knows its own place")
        if resume is not None and resume.workers is not None:
            raise ValueError("consumed= cannot extend one worker's state")
        progress = resume.progress if resume is not None else Progress()
        remaining = progress.remaining(total)
        if not 0 <= consumed <= remaining:
            raise ValueError(f"{consumed=} must be in [0, {remaining}]: the units left in epoch {epoch}")
        progress = merge_progress(progress, total, WorkerSlice(1, 0, 1), [consumed])
    elif live is not None and live.epoch == epoch:
        progress, workers, yielded = live.progress, live.workers, live.yielded
    elif resume is not None:
        progress, workers, yielded = resume.progress, resume.workers, resume.yielded
    else:
        progress = Progress()
    if workers is not None and not in_worker:
        progress = merge_progress(progress, total, workers, [yielded])
        workers = None
    return encode_state(identity, epoch, progress, workers, yielded, plan.rest)


def load_state(
    state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    plan: EpochPlan,
    identity: Mapping[str, Any],
    in_worker: bool,
) -> Resume:
    """The place a state names: a rank's, a loader's, a list of all ranks' states, or a global state.

    Raises:
        ValueError: the state does not fit the dataset (see :func:`decode_state`), or is one
            worker's state loaded outside a worker.
    """
    if not isinstance(state, Mapping):
        state = combine_states(list(state), plan)
    elif is_loader_state(state):

        def units_of(inner: Mapping[str, Any]) -> int:
            rest = inner.get("rest")
            return dataclasses.replace(
                plan, rest=None if rest is None else check_ranges(rest, plan.epoch_size)
            ).units_per_rank

        state = merge_loader_state(state, units_of)
    resume = decode_state(state, identity, plan.epoch_size)
    if resume.workers is not None and not in_worker:
        raise ValueError(
            "this is the state of one DataLoader worker; load the whole loader state "
            "(StatefulDataLoader.state_dict()) to resume in another process"
        )
    return resume
