"""Encoders for tests of the conversion's worker processes (importable by a spawned worker).

``encode_under_lock`` takes a lock that a thread of the test holds meanwhile: a worker forked
from the test process would inherit it held and wait for ever; a spawned worker imports this
module afresh and finds it free. ``die`` ends the worker process at once, as the out-of-memory
killer would.
"""

from __future__ import annotations

import os
import threading

import torch_tfrecord as tt

LOCK = threading.Lock()


def encode_under_lock(task: int) -> bytes:
    with LOCK:
        return tt.encode_example({"task": [task]})


def die(task: int) -> bytes:
    os._exit(3)
