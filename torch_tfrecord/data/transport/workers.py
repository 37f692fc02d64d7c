"""DataLoader workers that end when the process that started them is gone.

PyTorch's own check misses two cases: a worker notices its parent's death only between batches
(every 5 s while idle, never during a long batch), and a worker that was still starting when
the parent died (a slow ``worker_init_fn``, a loaded machine) records the new parent (init) as
its parent and waits for work for ever, holding its memory and any pipe it inherited. Our
datasets start, once per worker process, a thread that ends the worker when the process that
created it (``multiprocessing.parent_process()``, its pid recorded by that process) no longer
exists, or when the worker is reparented (its parent process id changes: the main process, or
with the ``forkserver`` start method the fork server, ended). A parent that died before the
watch started is found by the first check, so there is no window in which a death is missed.

Why not ``prctl(PR_SET_PDEATHSIG)``: on Linux its "parent" is the *thread* that started the
worker, so workers started from a thread that later ends (a prefetching thread, persistent
workers reused by the next epoch's thread) would be killed under a living main process.

On Windows this is a no-op: ``os.getppid()`` there keeps the dead parent's pid, and PyTorch's
watchdog waits on the parent's process handle instead.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time

# Every DataLoader worker seeds NumPy's global generator as it starts (torch's worker loop calls
# numpy.random.seed), importing numpy.random if the main process has not: 12 ms of CPU in each
# worker of each epoch (without persistent_workers), 0.08 ms per batch of an epoch of 313 small
# batches with 2 workers. Imported here once, forked workers inherit it.
import numpy.random  # noqa: F401
from torch.utils.data import get_worker_info

__all__ = ["end_with_parent", "watch_parent"]

POLL_SECONDS = 0.25  # how soon an orphaned worker ends

_watching: int | None = None  # the pid of the process whose watch thread runs


def end_with_parent() -> None:
    """In a DataLoader worker (``get_worker_info()`` is set), starts once per process the thread
    that ends the worker when its parent is gone; elsewhere does nothing."""
    global _watching
    if _watching == os.getpid() or sys.platform == "win32" or get_worker_info() is None:
        return
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return
    _watching = os.getpid()
    watch_parent(parent.pid, "DataLoader worker")


def watch_parent(parent_pid: int, what: str) -> None:
    """Starts the thread that ends this process (``what``, for the message) when ``parent_pid``
    is gone or this process is reparented (the loading process of ``process=True`` uses it too)."""
    threading.Thread(
        target=_watch, args=(parent_pid, what), name="torch_tfrecord-parent-watch", daemon=True
    ).start()


def _watch(parent_pid: int, what: str) -> None:
    # The process that forked this one: the main process, or with "forkserver" the fork server.
    forked_by = os.getppid()
    while os.getppid() == forked_by and _exists(parent_pid):
        time.sleep(POLL_SECONDS)
    try:
        os.write(
            2,
            f"torch_tfrecord: {what} {os.getpid()} ends: its main process {parent_pid} is gone\n".encode(),
        )
    except OSError:  # nobody reads our stderr any more
        pass
    os._exit(1)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        return True
    return True
