"""The one epoch driver: what every iterable dataset of ours does per epoch, written once.

A dataset built on :class:`EpochDataset` is a *plan* (which items, in which order, for each
(epoch, rank, worker): an :class:`~torch_tfrecord.data.order.plan.EpochPlan`) plus a *reader* (the
items of given ids, loaded, then finished by the user's transform). The driver does the rest, the
same for ``TFRecordDataset``, ``MixedDataset`` and what is built on them: the plan's slice for
this rank and worker, automatic epochs and ``set_epoch`` (:mod:`.counter`), the training
frameworks' wrappers (:mod:`..frameworks`), the loader's guards (:mod:`.guards`), prefetch,
threads, a loading process and the worker hand-off (:mod:`..transport`), ``state_dict`` /
``load_state_dict``, also on another world size (:mod:`..order.resume`), and the load telemetry
of ``stats()`` (:mod:`..telemetry`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from ...support.stages import HANDOFF, begin, end
from ..decoding import PADDING_KEY
from ..frameworks.detect import DISPATCHED_STATE, DispatchFlag, Wrapper, warn_unknown_versions
from ..frameworks.internals import (
    calling_loader,
    calling_wrapper,
    check_loader_batch_size,
    use_fast_convert,
    warn_batch_size_unknown,
)
from ..frameworks.wrapped import shard_runs, world_items, wrapped_len
from ..order.plan import SAMPLE_CHUNK, EpochPlan, Progress, WorkerSlice, reading_chunk
from ..order.resume import Live, Resume, combine_states, load_state, rank_state, resume_point
from ..order.schedule import NoSchedule
from ..telemetry.shared import Observed, Telemetry, watch_starting_loader
from ..transport.fast_convert import convert
from ..transport.handoff import pack_tensors
from ..transport.loading_process import check_process, load_ahead
from ..transport.runs import MAX_RUN, Pace, Task, run_of, runs
from ..transport.threaded import check_prefetch, check_threads
from ..transport.workers import end_with_parent
from .counter import EpochCounter
from .guards import EpochGuard, check_loader

__all__ = ["DEFAULT_PREFETCH", "EpochDataset"]

logger = logging.getLogger(__name__)

DEFAULT_PREFETCH = 2
"""Batches loaded ahead in the main process: enough to hide loading behind a step (see bench_overlap)."""
_PLAN_IDS = 1 << 16
"""Ids the plan gives in one call at most, beyond one run's most of batches (see :func:`_plan_block`)."""
Ids = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]


class EpochDataset(IterableDataset[Any], Observed):
    """An iterable dataset split exactly over DDP ranks and DataLoader workers, epoch by epoch.

    Subclasses set :attr:`plan` (the epoch's split: world, batch size, ``drop_last``) and give
    the reader: :meth:`load` (the items of some ids of an epoch's plan, read and decoded, in the
    loading thread) and :meth:`finish` (the user's transform, in the loop's thread); and, where
    they differ from the defaults, :meth:`_base_plan` (the plan of an epoch),
    :meth:`_read_schedule` (what a cache hears of the reads), :meth:`_identity` (what a saved
    state must match), :meth:`_wrap_state` / :meth:`_unwrap_state` (a state of their own around
    the split's). Batch mode (``plan.batch_size``): one item per unit, a batch; sample mode: one
    item per id. :meth:`load` (and :meth:`finish`, with ``transform_threads``) may run in several
    threads at once.

    Args:
        plan: the split of every epoch (before a loaded state narrows one).
        prefetch: batches loaded ahead by a thread in the main process (0: none); with
            ``threads``, made or waiting ahead beyond one per thread.
        threads: threads of the main process making that many batches at once (0: none).
        transform_threads: :meth:`finish` runs on those threads too, not in the loop's thread.
        process: the loading (threads, prefetch) runs in a child process (:mod:`..transport.loading_process`).
        shuffled: the order differs between epochs (for the guard against a forgotten ``set_epoch``).
        loader_batch_size: in sample mode, the DataLoader's ``batch_size`` (found from the loader
            itself when None: see :mod:`..frameworks.internals`).
    """

    plan: EpochPlan

    def __init__(
        self, plan: EpochPlan, *, prefetch: int, shuffled: bool, loader_batch_size: int | None = None,
        threads: int = 0, transform_threads: bool = False, process: bool = False,
    ) -> None:  # fmt: skip
        self.plan = plan
        self.prefetch = check_prefetch(prefetch)
        self.threads = check_threads(threads, transform_threads)
        self.transform_threads = transform_threads
        self.process = check_process(process)
        self.loader_batch_size = check_loader_batch_size(loader_batch_size, plan.batch_size)
        self._epoch = EpochCounter()
        self._dispatch = DispatchFlag()
        self._epoch_guard = EpochGuard(shuffled)
        self._resume: Resume | None = None
        self._live: Live | None = None
        self._telemetry = Telemetry()

    def __getstate__(self) -> dict[str, Any]:
        watch_starting_loader()  # pickled for a spawned DataLoader worker: time the loader's next()
        return self.__dict__

    # -- what a subclass gives -------------------------------------------------------------

    def load(self, ids: Ids, padding: Flags, epoch: int, batched: bool) -> list[Any]:
        """The items of ``ids`` (ids of the epoch's plan), loaded but not finished: one batch
        (``batched``) or one item per id."""
        raise NotImplementedError

    def load_batches(self, parts: list[tuple[Ids, Flags]], epoch: int) -> list[Any] | None:
        """The batches of ``parts`` loaded at once, as :meth:`load` loads each; None: one by one."""
        return None

    def finish(self, loaded: Any, epoch: int) -> Any:
        """A loaded item as the loop receives it (the transform runs here, in the loop's thread)."""
        return loaded

    def guard_spec(self) -> Mapping[str, Any] | None:
        """The feature specs of the samples (for the loader's guards); None: unknown."""
        return None

    def _base_plan(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch`` before a loaded state narrows it."""
        return self.plan

    def _read_schedule(
        self, plan: EpochPlan, epoch: int, workers: WorkerSlice, progress: Progress, skip: int
    ) -> Any:
        """What the cache hears of this worker's reads (``reached(unit)``, ``finished()``)."""
        return NoSchedule()

    def _identity(self, plan: EpochPlan) -> dict[str, Any]:
        """What a saved state of this dataset, split by ``plan``, must match (see :mod:`..order.resume`)."""
        raise NotImplementedError

    def _wrap_state(self, split: dict[str, Any], epoch: int) -> dict[str, Any]:
        """The dataset's state around the split's state (:mod:`..order.resume`'s format)."""
        return split

    def _unwrap_state(
        self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> tuple[Any, EpochPlan, dict[str, Any]]:
        """The split's state(s) inside ``state``, the plan and the identity to load them against."""
        return state, self.plan, self._identity(self.plan)

    def _resumed(self, resume: Resume) -> None:
        """A state was loaded (in this process) that resumes at ``resume``."""

    # -- the driver ------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch in progress (before the first pass: the first epoch)."""
        return self._epoch.current()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (call it in the main process before each epoch); reaches persistent workers.

        Optional: without it each pass over the dataset is the next epoch (0, 1, 2, ...), for the
        training frameworks that never call it. Once called, its epoch decides, until called again.
        A state loaded for another epoch is let go: the new epoch starts from its beginning.
        """
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper, clear=True)
        self._check_wrapper(wrapper)
        self._epoch.set(epoch)
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def __len__(self) -> int:
        """Batches (batch mode) or samples this rank gets per epoch (in the current one, if resumed).

        Under a DataLoader of ``batch_size=B`` in sample mode, the rank gets exactly
        ``ceil(len(dataset) / B)`` batches, ``len(loader)``, with any number of workers (each
        worker takes runs of B samples). Asked by an Accelerate wrapper, it is the length that
        makes the wrapper's own ``len`` the batches each rank gets.
        """
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper)
        self._check_wrapper(wrapper)
        units = self._plan_for(self._epoch.current()).units_per_rank
        shard_run = wrapper.run if wrapper is not None and wrapper.kind == "shard" else None
        return wrapped_len(units, self.plan.world_size, self._dispatch.get(), shard_run)

    def _check_wrapper(self, wrapper: Wrapper | None) -> None:
        if wrapper is not None:
            wrapper.check(self.plan.world_size, self.plan.rank, self.plan.batch_size is not None)

    def _plan_for(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch``: narrowed to what was left of it when a global state was loaded."""
        plan = self._base_plan(epoch)
        resume = self._resume
        if resume is not None and resume.epoch == epoch and resume.rest is not None:
            return dataclasses.replace(plan, rest=resume.rest)
        return plan

    def __iter__(self) -> Iterator[Any]:
        end_with_parent()  # now, as the worker creates its fetcher: not at its first batch request
        batch_mode = self.plan.batch_size is not None
        view = calling_loader()
        check_loader(view.fetcher, batch_mode, self.guard_spec())
        use_fast_convert(view.fetcher, convert)
        wrapper = calling_wrapper()
        self._dispatch.note(wrapper)
        self._check_wrapper(wrapper)
        if get_worker_info() is None:
            warn_unknown_versions()
        resume = self._resume
        # Counted now, as a DataLoader creates its fetcher: every worker of a pass begins it.
        epoch = self._epoch.begin(None if resume is None or resume.workers is None else resume.epoch)
        if self._dispatch.get() and self.plan.world_size > 1:
            return self._serve_world(epoch)
        if wrapper is not None and wrapper.kind == "shard":
            before = self.plan.rank * wrapper.run
            after = (self.plan.world_size - self.plan.rank - 1) * wrapper.run
            return shard_runs(self._iterate(epoch, wrapper.run), wrapper.run, before, after, PADDING_KEY)
        return self._iterate(epoch, None)

    def _loader_run(self) -> int | None:
        """Sample mode: the loader's batch size, which workers take runs of (at a generator's first step)."""
        view = calling_loader(depth=8)
        if self.loader_batch_size is not None:
            if view.batch_size not in (None, self.loader_batch_size):
                raise ValueError(
                    f"the dataset was given loader_batch_size={self.loader_batch_size}, but the DataLoader "
                    f"iterating it has batch_size={view.batch_size}: give both the same"
                )
            return self.loader_batch_size
        if view.batch_size is None and get_worker_info() is not None and view.fetcher is None:
            warn_batch_size_unknown(view)
        return view.batch_size

    def _iterate(self, epoch: int, run: int | None) -> Iterator[Any]:
        info = get_worker_info()
        plan = self._plan_for(epoch)
        if plan.batch_size is None and run is None:
            run = self._loader_run()
        chunk = 1 if plan.batch_size else (run or SAMPLE_CHUNK)
        workers = WorkerSlice(info.num_workers, info.id, chunk) if info else WorkerSlice(1, 0, chunk)
        self._epoch_guard.starting(epoch, self._resume is not None and self._resume.epoch == epoch)
        progress, skip = resume_point(self._resume, epoch, workers)
        live = self._live = Live(epoch, progress, workers, skip)
        # In the main process: loaded ahead by threads (or one prefetch thread) while the loop trains.
        threads, prefetch = (self.threads, self.prefetch) if info is None else (0, 0)
        finished = threads > 0 and self.transform_threads  # the transform ran on the threads
        # Batches handed to a thread go in runs (see ..transport.runs); made in the loop, one by one.
        pace = Pace() if plan.batch_size is not None and (threads or prefetch) else None
        tasks = functools.partial(self._loads, plan, workers, progress, skip, epoch, finished, pace)
        in_child = self.process and info is None  # the same tasks, run in one loading process
        loads = load_ahead(tasks, threads, prefetch, self._telemetry, in_child, plan.batch_size is not None)
        pack = info is not None and plan.batch_size is not None
        meter = self._telemetry.meter(None if plan.batch_size else run)  # the loop's time in next()
        try:
            meter.asked()
            # The transform runs here, in the loop's thread (it may draw from torch's global RNG,
            # which the loop uses too), unless it ran on the loading threads (transform_threads);
            # the place is counted here: what the loop received (never what threads made ahead).
            for loaded in loads:
                for item in loaded:
                    item = item if finished else self.finish(item, epoch)
                    if pack:  # a batch is sent to the main process as one block (see .handoff)
                        token = begin()
                        item = pack_tensors(item)
                        end(HANDOFF, token)
                    live.yielded += 1  # counted before the yield: a state taken now includes it
                    meter.ready()
                    yield item
                    meter.asked()
        finally:
            loads.close()  # a loop left early stops the loading
            meter.close()
        self._epoch_guard.finished(epoch)
        if info is None and self._resume is not None and self._resume.epoch == epoch:
            self._resume = None  # the resumed epoch is over; iterating it again starts it afresh

    def _loads(
        self, plan: EpochPlan, workers: WorkerSlice, progress: Progress, skip: int, epoch: int, finish: bool,
        pace: Pace | None = None,
    ) -> Generator[Callable[[], list[Any]], None, None]:  # fmt: skip
        """The rank's share of the epoch from ``progress`` on, as tasks that each load one read
        (a list of batches in batch mode: one, or a run of them as ``pace`` says; else of
        samples), not finished unless ``finish``."""
        schedule = self._read_schedule(plan, epoch, workers, progress, skip)
        remaining = progress.remaining(plan.units_per_rank)
        size = plan.batch_size
        # Batch mode: the order of a block of batches at once (numpy costs per call), cut in runs.
        block_size = _plan_block(size) if size else reading_chunk(workers.chunk)
        for block in workers.items(remaining, skip, block=block_size):
            units = progress.units(block)
            if size:
                ids, padding = plan.records(plan.unit_positions(units), epoch)
                starts = range(0, len(ids), size)
                for run in runs(len(starts), pace):
                    for place in run:
                        schedule.reached(block[place])
                    yield self._run(ids, padding, starts[run.start : run.stop], size, epoch, finish, pace)
            else:
                schedule.reached(block[0])
                yield self._task(*plan.records(units, epoch), epoch, False, finish)
        schedule.finished()

    def _run(
        self, ids: Ids, padding: Flags, starts: range, size: int, epoch: int, finish: bool, pace: Pace | None
    ) -> Task:
        """A task loading the batches of ``size`` at ``starts``: at once where :meth:`load_batches`
        can, else one by one (which raise or skip each error at its own batch)."""
        parts = [(ids[at : at + size], padding[at : at + size]) for at in starts]
        together = functools.partial(self.load_batches, parts, epoch) if len(parts) > 1 else None
        loads = [self._task(*part, epoch, True, finish) for part in parts]
        return run_of(loads, pace, together, functools.partial(self.finish, epoch=epoch) if finish else None)

    def _task(
        self, ids: Ids, padding: Flags, epoch: int, batched: bool, finish: bool
    ) -> Callable[[], list[Any]]:
        if not finish:
            return functools.partial(self.load, ids, padding, epoch, batched)
        return lambda: [self.finish(item, epoch) for item in self.load(ids, padding, epoch, batched)]

    def _serve_world(self, epoch: int) -> Iterator[Any]:
        """Under Accelerate's DataLoaderDispatcher: on rank 0, every rank's units in the order in
        which the dispatcher hands them out (see :mod:`..frameworks.wrapped`); nothing on the other ranks."""
        plan = self._plan_for(epoch)
        if plan.rank != 0:
            return  # only rank 0's loader is iterated; the others would read for nothing
        if self._resume is not None and self._resume.epoch == epoch:
            raise ValueError(DISPATCHED_STATE)
        info = get_worker_info()
        run = 1 if plan.batch_size else (self._loader_run() or 1)
        workers = WorkerSlice(info.num_workers, info.id, run) if info else WorkerSlice(1, 0, run)
        rank_plans = [dataclasses.replace(plan, rank=rank) for rank in range(plan.world_size)]
        total = plan.world_size * plan.units_per_rank
        for block in workers.items(total, 0, block=reading_chunk(run)):
            owners, units = world_items(block, plan.units_per_rank, plan.world_size, run)
            if plan.batch_size:
                for owner, unit in zip(owners.tolist(), units.tolist(), strict=True):
                    ids, padding = rank_plans[owner].records(plan.unit_positions([unit]), epoch)
                    batch = self.finish(self.load(ids, padding, epoch, True)[0], epoch)
                    yield batch if info is None else pack_tensors(batch)
            else:
                ids = np.empty(len(units), np.int64)
                padding = np.empty(len(units), bool)
                for owner in np.unique(owners).tolist():
                    mine = owners == owner
                    ids[mine], padding[mine] = rank_plans[owner].records(units[mine], epoch)
                for item in self.load(ids, padding, epoch, False):
                    yield self.finish(item, epoch)
        self._epoch_guard.finished(epoch)

    def state_dict(self, consumed: int | None = None, *, gather: bool = False) -> dict[str, Any]:
        """Where this rank is in the current epoch, to resume from with :meth:`load_state_dict`.

        Args:
            consumed: for a plain DataLoader with workers, whose progress the dataset in the main
                process cannot see: the batches (batch mode) taken from the loader since this
                epoch's iteration began (after any loaded place). Exact in batch mode with any
                number of workers, and in sample mode with at most one worker; with more, use
                torchdata's StatefulDataLoader.
            gather: all ranks call it together (a collective over the default process group)
                and each gets the same *global* state: what is left of the epoch, which resumes
                on any number of ranks (save it once, from rank 0).

        Without ``consumed``: in the main process after iterating in it (``num_workers=0``), the
        rank's exact place; inside a DataLoader worker (as torchdata's StatefulDataLoader calls
        it), that worker's place. A StatefulDataLoader's saved state can be loaded into this
        dataset too, to resume with another number of workers.
        """
        if self._dispatch.get() and self.plan.world_size > 1:
            raise ValueError(DISPATCHED_STATE)
        in_worker = get_worker_info() is not None
        live = self._live
        epoch = live.epoch if in_worker and live is not None else self._epoch.current()
        plan = self._plan_for(epoch)
        split = rank_state(plan, self._identity(plan), epoch, live, self._resume, consumed, in_worker)
        if gather:
            if in_worker or not (dist.is_available() and dist.is_initialized()):
                raise ValueError("gather=True needs an initialized process group, in the main process")
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, split)
            split = combine_states(states, plan)
        return self._wrap_state(split, epoch)

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Resumes from :meth:`state_dict`, from a torchdata StatefulDataLoader's ``state_dict()``,
        or from the states of all ranks of a job.

        Call it before iterating (before the DataLoader starts its workers). The epoch is set
        to the state's; :meth:`set_epoch` with the same epoch keeps the place, another epoch
        starts that epoch from the beginning.

        A rank's state resumes any rank of a job with the same world size: the ranks take their
        equal shares in step, so rank 0's place (what Lightning and Accelerate save) is every
        rank's place in its own share. To resume on another number of ranks, give every new
        rank the states of *all* old ranks (a list of their ``state_dict()`` or
        StatefulDataLoader states, in any order) or the global state of
        ``state_dict(gather=True)``: the rest of the epoch is split afresh over the new ranks,
        each the same number of batches (with ``drop_last=True`` fewer than one new global
        batch is left out of it; with False the last batches are padded), each item of the
        rest read exactly once; later epochs are the new world's normal epochs.

        Raises:
            ValueError: the state is from another dataset (files, record count), seed, shuffle,
                samples_per_epoch, batch size, drop_last or world size / rank, or is not a
                state of this class.
        """
        in_worker = get_worker_info() is not None
        split, plan, identity = self._unwrap_state(state)
        resume = load_state(split, plan, identity, in_worker)
        self._resumed(resume)
        if not in_worker:
            self._epoch.restart_at(resume.epoch)
        self._resume = resume
        self._live = None


def _plan_block(batch_size: int) -> int:
    """Batches whose ids the plan gives in one call. A run does not span two blocks, so a block of
    one run's most (:data:`MAX_RUN`) left a short run at each block's end (a pace of 13 batches:
    runs of 13 and 3), and a short run costs a whole run's Python (benchmarks/README.md, "Where
    the GIL goes"): 4 runs' most of small batches, no more than :data:`_PLAN_IDS` ids (large
    batches go in runs of one or a few), and never fewer than one run's most."""
    return max(MAX_RUN, min(4 * MAX_RUN, _PLAN_IDS // batch_size))
