"""Real process groups for tests: a free port on 127.0.0.1 and spawned ranks watched for hangs."""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
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
