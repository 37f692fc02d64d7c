"""Worker processes for the parallel tools (index building, conversion).

The pools start their workers with ``spawn``, never ``fork``: the calling process may have
threads (torch's, fsspec's event loop, our read-ahead and shard readers, a tqdm monitor, an
earlier pool's management threads), and a child forked while one of them holds a lock can
hang for ever (CPython warns about it from 3.12; 3.14 stops forking by default). Spawned
workers import the module of the function they run (about 1.5 s for ``torch``), which is
small beside the work these pools are for. As with a DataLoader on macOS or Windows, a script
that starts a pool needs an ``if __name__ == "__main__":`` guard: a spawned worker imports the
script, and without the guard runs it again.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

__all__ = ["WorkerDiedError", "pid_alive", "worker_processes"]


class WorkerDiedError(RuntimeError):
    """A worker process ended before its work was done."""


@contextlib.contextmanager
def worker_processes(jobs: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``jobs`` spawned worker processes that lives exactly as long as the ``with``
    block: leaving it, normally or by an error, cancels the tasks not yet started and waits for
    the workers (never left to the garbage collector). A worker that dies is a
    :class:`WorkerDiedError` that says what usually kills one."""
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    except BrokenProcessPool as error:
        raise WorkerDiedError(
            "a worker process died before its work was done: it was killed (out of memory?), or "
            'the script that started it lacks `if __name__ == "__main__":` (workers are spawned: '
            "each imports the main script, and without the guard runs it again; see its error above)"
        ) from error
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
