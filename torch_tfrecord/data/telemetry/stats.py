"""``tt.LoadStats``: what ``dataset.stats()`` says of a window of loading, and which stage to fix.

Made from the counters of :mod:`.shared` (one row per process: the main process first, then
the DataLoader workers) by :func:`summarize`, a pure function of them. The loop's wait decides
whether loading matters at all (``"none"`` below :data:`WAIT_SHARE_NONE`); if it does, the stage
that costs the loop most per batch is the bottleneck: a stage's time per batch where it runs,
divided by the number of workers that run it side by side.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...records.atomic import atomic_write
from ...support.stages import (
    BUCKETS,
    BYTES,
    CACHED,
    DEADLINE_RETRIES,
    FIRST_COUNT,
    FIRST_NS,
    HEDGES_SENT,
    HEDGES_WON,
    HISTOGRAM,
    LOOP_COUNT,
    LOOP_NS,
    LOOP_SPAN,
    RECORDS,
    REMOTE,
    REQUESTS,
    STAGES,
    WORKER_SPAN,
    bucket_bounds,
)
from .counters import PROCESS_SLOT

__all__ = [
    "BOTTLENECKS",
    "WAIT_SHARE_NONE",
    "LoadStats",
    "ProcessLoad",
    "Span",
    "summarize",
    "write_chrome_trace",
]

BOTTLENECKS = (
    "none",
    "read",
    "remote",
    "inflate",
    "decode",
    "image_decode",
    "transform",
    "handoff",
    "unknown",
)
"""What ``LoadStats.bottleneck`` can be (``"unknown"``: nothing was measured in the window)."""
WAIT_SHARE_NONE = 0.05
"""Below this share of the wall time spent waiting in ``next()``, loading is no bottleneck."""
_SPAN_NAMES = {
    **{2 * i: stage for i, stage in enumerate(STAGES)},
    LOOP_SPAN: "next() wait",
    WORKER_SPAN: "make batch",
}
Int64s = npt.NDArray[np.int64]
Span = tuple[int, int, int, int, int]
"""A traced stage: ``(row, pid, code, start_ns, end_ns)``, ``code`` the stage plus 32 times the thread id."""

_ADVICE = {
    "none": "the loop waited {wait} of the time for data: loading keeps up, and a faster loader would "
    "not make training faster",
    "read": "reading records from local files costs most ({cost} per batch): shuffle='shards' or "
    "'block:K' reads them in order (see the shuffling guide), or put the shards on faster storage",
    "remote": "fetching from remote storage costs most ({cost} per batch, {requests}): cache the "
    "shards on the node (cache_dir=, on by default: each shard is fetched once), read in order with "
    "shuffle='block:K' or 'shards', or run more workers so that requests overlap",
    "inflate": "inflating GZIP / ZLIB shards costs most ({cost} per batch): shuffle='block:K' or "
    "'shards' inflates each part once, `pip install rapidgzip` inflates in parallel, or store the "
    "shards uncompressed",
    "decode": "decoding Examples costs most ({cost} per batch): give a spec of only the features you "
    "use, batch_size= (batches decoded at once), and the native decoder (unset TORCH_TFRECORD_DECODER)",
    "image_decode": "decoding images costs most ({cost} per batch): decode them smaller with "
    "tt.Image(size=(H, W)) (JPEGs are decoded at a reduced scale), dct='fast', or on the GPU with "
    "tt.Image(device='cuda')",
    "transform": "your transform costs most ({cost} per batch): make it cheaper, run it on batches "
    "(batch_size=) or on the GPU after the loader",
    "handoff": "handing batches from the workers to the loop costs most ({cost} per batch): use "
    "batch_size= (a batch travels as one block), fewer and larger tensors, persistent_workers=True",
}


@dataclasses.dataclass(frozen=True)
class ProcessLoad:
    """One process's part in a window.

    Attributes:
        name: ``"main"``, ``"worker K"`` or ``"loading process"``.
        pid: its process id.
        batches: batches it received (main) or made (a worker).
        records: records it read and decoded.
        busy_seconds: a worker's time making batches (the main process: its wait in ``next()``).
        stage_seconds: seconds of each stage it ran.
    """

    name: str
    pid: int
    batches: int
    records: int
    busy_seconds: float
    stage_seconds: Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class LoadStats:
    """A window of loading as ``dataset.stats()`` saw it: is the training loop waiting on data,
    and if so, on which stage. ``print(stats)`` shows a small table.

    Times are wall-clock. A stage's seconds are its own (a stage inside another, such as image
    decoding inside decoding, is not counted twice), summed over processes and threads.

    Attributes:
        seconds: the window's wall time (from the loop's first ``next()`` or the last reset).
        batches: batches the loop received (in sample mode without workers: loader batches).
        records: records read and decoded, by every process.
        bytes: bytes read from the shards.
        wait_seconds: the loop's time in ``next()``, the first batch of each pass left out.
        wait_share: ``wait_seconds`` as a share of the window's time after start-up; None when
            the wait could not be measured (see the telemetry guide).
        wait_p50, wait_p95, wait_p99: seconds the loop waited per batch (None without waits).
        startup_seconds: the loop's waits for the first batch of each pass (workers starting).
        stage_seconds: seconds of each stage of :data:`~torch_tfrecord.support.stages.STAGES`.
        stage_per_batch: seconds of each stage per batch, in the process that ran it.
        remote_requests: requests to remote storage that reads waited for (a cache's downloads
            in the background are not counted).
        remote_bytes: bytes those reads took from the store.
        cache_hit_ratio: with a node cache, the share of the bytes read that did not wait on the
            store; None without one.
        workers: each process that took part: the main process, then the workers.
        bottleneck: one of :data:`BOTTLENECKS`.
        advice: a sentence saying what to change.
        remote_hedges: of ``remote_requests``, those sent again because the first copy was still
            unanswered at the running p95 latency (see the remote-storage guide).
        remote_hedges_won: hedges that answered before the request they copied.
        remote_deadline_retries: requests given up on at their deadline, and retried.
    """

    seconds: float
    batches: int
    records: int
    bytes: int
    wait_seconds: float
    wait_share: float | None
    wait_p50: float | None
    wait_p95: float | None
    wait_p99: float | None
    startup_seconds: float
    stage_seconds: Mapping[str, float]
    stage_per_batch: Mapping[str, float]
    remote_requests: int
    remote_bytes: int
    cache_hit_ratio: float | None
    workers: tuple[ProcessLoad, ...]
    bottleneck: str
    advice: str
    remote_hedges: int = 0
    remote_hedges_won: int = 0
    remote_deadline_retries: int = 0

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    def scalars(self, prefix: str = "data/") -> dict[str, float]:
        """The numbers to log every N steps (TensorBoard, Lightning's ``self.log_dict``,
        ``accelerator.log``): the wait's share and p95, the rates, each stage's milliseconds per batch."""
        found = {
            "wait_share": self.wait_share if self.wait_share is not None else float("nan"),
            "wait_p95_ms": 1000 * self.wait_p95 if self.wait_p95 is not None else float("nan"),
            "records_per_s": self.records_per_second,
            "mb_per_s": self.bytes_per_second / 1e6,
        }
        found.update({f"{stage}_ms": 1000 * cost for stage, cost in self.stage_per_batch.items()})
        return {prefix + key: float(value) for key, value in found.items()}

    def __str__(self) -> str:
        workers = [p for p in self.workers if p.name != "main"]
        helpers = f"{len(workers)} workers"
        if any(p.name == "loading process" for p in workers):
            helpers = "a loading process" + (f", {len(workers) - 1} workers" if len(workers) > 1 else "")
        lines = [
            f"load stats: {self.seconds:.1f} s, {self.batches:,} batches, {self.records:,} records "
            f"({self.records_per_second:,.0f} records/s, {self.bytes_per_second / 1e6:,.1f} MB/s), "
            f"{helpers}"
        ]
        if self.wait_share is not None:
            percentiles = ", ".join(
                f"{name} {_ms(value)}"
                for name, value in (("p50", self.wait_p50), ("p95", self.wait_p95), ("p99", self.wait_p99))
                if value is not None
            )
            lines.append(
                f"the loop waited {self.wait_share:.0%} of the time ({percentiles} per batch; "
                f"start-up {self.startup_seconds:.2f} s)"
            )
        else:
            lines.append("the loop's wait was not measured")
        lines.append(f"{'stage':14} {'ms/batch':>9} {'share':>6}")
        total = sum(self.stage_seconds.values()) or 1.0
        for stage in STAGES:
            if stage == "handoff" and not workers and not self.stage_seconds[stage]:
                continue  # (a hand-off only where workers hand batches over)
            mark = "  <- bottleneck" if stage == self.bottleneck else ""
            lines.append(
                f"{stage:14} {1000 * self.stage_per_batch[stage]:>9.2f} "
                f"{self.stage_seconds[stage] / total:>6.0%}{mark}"
            )
        if self.remote_requests or self.remote_bytes:
            hits = "" if self.cache_hit_ratio is None else f"; cache hits {self.cache_hit_ratio:.0%} of bytes"
            slow = ""
            if self.remote_hedges or self.remote_deadline_retries:
                slow = (
                    f"; {self.remote_hedges:,} hedged ({self.remote_hedges_won:,} answered first), "
                    f"{self.remote_deadline_retries:,} past their deadline"
                )
            lines.append(
                f"remote: {self.remote_requests:,} requests, {self.remote_bytes / 1e6:,.1f} MB{hits}{slow}"
            )
        for process in workers:
            share = process.busy_seconds / self.seconds if self.seconds > 0 else 0.0
            lines.append(f"{process.name} (pid {process.pid}): {process.batches:,} batches, busy {share:.0%}")
        lines.append(f"bottleneck: {self.bottleneck}: {self.advice}")
        return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms" if seconds < 10 else f"{seconds:.0f} s"


def _percentile(histogram: Int64s, share: float) -> float | None:
    total = int(histogram.sum())
    if not total:
        return None
    index = int(np.searchsorted(np.cumsum(histogram), share * total))
    low, high = bucket_bounds(min(index, BUCKETS - 1))
    return (low + high) / 2e9


def summarize(
    window: Int64s | None,
    totals: Int64s | None,
    pids: Int64s | None,
    seconds: float,
) -> LoadStats:
    """The :class:`LoadStats` of a window.

    Args:
        window: each process's counters in the window (row 0 the main process, row ``1 + k``
            worker ``k``; the layout of :mod:`~torch_tfrecord.support.stages`); None when telemetry is off.
        totals: the same since the dataset was made (whether it ever read through a cache).
        pids: each row's process id.
        seconds: the window's wall time.
    """
    if window is None or totals is None or pids is None:
        return _empty("load telemetry is off (TORCH_TFRECORD_TELEMETRY=0)")
    main, workers = window[0], window[1:]
    main_batches = int(main[LOOP_COUNT] + main[FIRST_COUNT])
    made = workers[:, LOOP_COUNT] + workers[:, FIRST_COUNT]
    working = int(np.count_nonzero(made))
    worker_batches = int(made.sum())
    batches = main_batches or worker_batches
    records, read_bytes = int(window[:, RECORDS].sum()), int(window[:, BYTES].sum())
    if not batches and not records:
        return _empty("no batch was loaded in this window yet", seconds)
    stage_ns = {stage: int(window[:, 2 * i].sum()) for i, stage in enumerate(STAGES)}
    per_batch, cost = {}, {}
    for i, stage in enumerate(STAGES):
        in_main = main[2 * i] / max(1, main_batches) / 1e9
        in_workers = workers[:, 2 * i].sum() / max(1, worker_batches) / 1e9
        per_batch[stage] = float(in_main + in_workers)
        cost[stage] = float(in_main + in_workers / max(1, working))  # workers run side by side
    startup = main[FIRST_NS] / 1e9
    waited = int(main[LOOP_COUNT]) > 0
    wait = main[LOOP_NS] / 1e9
    steady = seconds - startup
    share = min(1.0, wait / steady) if waited and steady > 0 else None
    histogram = main[HISTOGRAM : HISTOGRAM + BUCKETS]
    remote_bytes = int(window[:, REMOTE + 1].sum())
    cached = bool(totals[:, CACHED].sum())
    bottleneck = _bottleneck(share, cost)
    return LoadStats(
        seconds=seconds,
        batches=batches,
        records=records,
        bytes=read_bytes,
        wait_seconds=float(wait),
        wait_share=share,
        wait_p50=_percentile(histogram, 0.5),
        wait_p95=_percentile(histogram, 0.95),
        wait_p99=_percentile(histogram, 0.99),
        startup_seconds=float(startup),
        stage_seconds={stage: ns / 1e9 for stage, ns in stage_ns.items()},
        stage_per_batch=per_batch,
        remote_requests=int(window[:, REQUESTS].sum()),
        remote_bytes=remote_bytes,
        cache_hit_ratio=max(0.0, 1 - remote_bytes / read_bytes) if cached and read_bytes else None,
        workers=_processes(window, pids),
        bottleneck=bottleneck,
        advice=_advice(bottleneck, share, cost, window, batches, working),
        remote_hedges=int(window[:, HEDGES_SENT].sum()),
        remote_hedges_won=int(window[:, HEDGES_WON].sum()),
        remote_deadline_retries=int(window[:, DEADLINE_RETRIES].sum()),
    )


def _bottleneck(share: float | None, cost: Mapping[str, float]) -> str:
    if share is not None and share < WAIT_SHARE_NONE:
        return "none"
    stage = max(cost, key=lambda name: cost[name])
    return stage if cost[stage] > 0 else "unknown"


def _advice(
    bottleneck: str,
    share: float | None,
    cost: Mapping[str, float],
    window: Int64s,
    batches: int,
    working: int,
) -> str:
    if bottleneck == "unknown":
        return "no stage of loading was timed in this window"
    requests = int(window[:, REQUESTS].sum())
    text = _ADVICE[bottleneck].format(
        wait=f"{share or 0:.0%}",
        cost=_ms(cost.get(bottleneck, 0.0)),
        requests=f"{requests / max(1, batches):.1f} requests per batch",
    )
    if bottleneck not in ("none", "handoff"):
        made = (
            window[PROCESS_SLOT, LOOP_COUNT] + window[PROCESS_SLOT, FIRST_COUNT]
            if len(window) > PROCESS_SLOT
            else 0
        )
        if working and made:  # the loading process made them
            text += "; or more threads in the loading process (threads=N), if cores are free"
        elif working:
            text += f"; or more workers than {working}, if cores are free"
        else:
            text += "; or spread it over more cores (threads=N on the dataset, or DataLoader(num_workers=N))"
    if share is None:
        text += " (the loop's wait was not measured: this is the costliest stage, not a measured wait)"
    return text + "."


def _processes(window: Int64s, pids: Int64s) -> tuple[ProcessLoad, ...]:
    found = []
    for row, counts in enumerate(window):
        batches = int(counts[LOOP_COUNT] + counts[FIRST_COUNT])
        if not batches and not counts[RECORDS] and row:
            continue
        found.append(
            ProcessLoad(
                name=_process_name(row, "main"),
                pid=int(pids[row]),
                batches=batches,
                records=int(counts[RECORDS]),
                busy_seconds=float(counts[LOOP_NS] + counts[FIRST_NS]) / 1e9,
                stage_seconds={stage: counts[2 * i] / 1e9 for i, stage in enumerate(STAGES)},
            )
        )
    return tuple(found)


def _empty(advice: str, seconds: float = 0.0) -> LoadStats:
    zeros = {stage: 0.0 for stage in STAGES}
    return LoadStats(
        seconds,
        0,
        0,
        0,
        0.0,
        None,
        None,
        None,
        None,
        0.0,
        zeros,
        dict(zeros),
        0,
        0,
        None,
        (),
        "unknown",
        advice + ".",
    )


def _process_name(row: int, main: str) -> str:
    """The name of the process whose counters are in ``row``."""
    if row == 0:
        return main
    return "loading process" if row == PROCESS_SLOT else f"worker {row - 1}"


def write_chrome_trace(path: str | os.PathLike[str], spans: Sequence[Span]) -> None:
    """Writes ``(row, pid, code, start_ns, end_ns)`` spans as Chrome trace JSON (``traceEvents``):
    a complete event per span (microseconds), and the names of the processes and threads."""
    events: list[dict[str, Any]] = []
    named: set[tuple[int, int]] = set()
    origin = min((span[3] for span in spans), default=0)
    for row, pid, code, start, end in spans:
        tid, kind = code >> 5, code & 31
        if (pid, -1) not in named:
            named.add((pid, -1))
            name = _process_name(row, "main process")
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            events.append(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": row}}
            )
        if (pid, tid) not in named:
            named.add((pid, tid))
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}}
            )
        events.append(
            {
                "ph": "X",
                "name": _SPAN_NAMES.get(kind, f"span {kind}"),
                "cat": "torch_tfrecord",
                "pid": pid,
                "tid": tid,
                "ts": (start - origin) / 1000,
                "dur": max(0, end - start) / 1000,
            }
        )
    with atomic_write(path) as out:
        out.write(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode())
