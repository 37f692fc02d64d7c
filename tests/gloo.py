"""Real process groups for tests: a free port on 127.0.0.1 and spawned ranks watched for hangs."""

from __future__ import annotations

import socket
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
    context = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=2):
            if time.monotonic() > deadline:
                pytest.fail(f"the process group did not finish within {timeout_s} s (a hang)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
