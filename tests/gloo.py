"""Real process groups for tests: a free port on 127.0.0.1, spawned ranks watched for hangs, and
ranks whose results are all-gathered for the test to check."""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(fn: Callable[..., None], nprocs: int, args: tuple[Any, ...], timeout_s: float) -> None:
    """Runs ``fn(rank, *args)`` in ``nprocs`` spawned processes; a hang fails the test after ``timeout_s``."""
    context = mp.start_processes(_rank, args=(fn, args), nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=2):
            if time.monotonic() > deadline:
                pytest.fail(f"the process group did not finish within {timeout_s} s (a hang)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


def gather_ranks(
    body: Callable[..., Any], world_size: int, args: tuple[Any, ...], timeout_s: float, out: Path
) -> list[Any]:
    """Runs ``body(*args)`` on each of ``world_size`` spawned ranks joined in a gloo process group
    on 127.0.0.1 (datasets take rank and world size from it); returns what each rank returned,
    in rank order (all-gathered, written by rank 0 to ``out`` as JSON)."""
    spawn(_gathering_rank, world_size, (world_size, free_port(), timeout_s, str(out), body, args), timeout_s)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _gathering_rank(
    rank: int,
    world_size: int,
    port: int,
    timeout_s: float,
    out: str,
    body: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timeout)
    try:
        result = body(*args)
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, result)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def _rank(rank: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    """One spawned rank: ``fn``'s exception fails it as usual; when ``fn`` returns, the process
    ends without interpreter finalization.

    Why: a gloo worker thread can still hold the last collective's tensors after ``wait()`` has
    returned (all_gather_object's, whose Python objects it must free under the GIL). If the
    interpreter is finalizing when it lets go, taking the GIL ends the thread with a forced unwind
    through torch's noexcept code, and the rank aborts with "terminate called without an active
    exception" (SIGABRT) after all its work was done: seen about once in 20 runs here, and once in
    CI; the backtrace is ProcessGroupGloo::runLoop -> TensorImpl::decref_pyobject ->
    PyEval_AcquireThread -> pthread_exit (a torch issue, pytorch/pytorch#179291). Leaving with
    ``os._exit`` once ``fn`` is done (it destroyed its process group and wrote its results)
    closes that window; ``faulthandler`` prints the Python stacks of a rank that crashes anyway.
    """
    faulthandler.enable()
    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
