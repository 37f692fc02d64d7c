"""Worker processes for the parallel tools (index building, conversion).

The pools start their workers with ``spawn``, never ``fork``: the calling process may have
threads (torch's, fsspec's event loop, our read-ahead and shard readers, a tqdm monitor, an
earlier pool's management threads), and a child forked while one of them holds a lock can
hang for ever (CPython warns about it from 3.12; 3.14 stops forking by default). Spawned
workers import the module of the function they run (about 1.5 s for ``torch``), which is
small beside the work these pools are for. As with a DataLoader on macOS or Windows, a script
that starts a pool at import time needs an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

__all__ = ["process_pool"]


def process_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` spawned worker processes."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
