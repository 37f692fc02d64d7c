"""An encoder for conversion tests that takes a lock a thread of the test holds meanwhile.

A worker forked from the test process would inherit the lock held and wait for ever; a
spawned worker imports this module afresh and finds it free.
"""

from __future__ import annotations

import threading

import torch_tfrecord as tt

LOCK = threading.Lock()


def encode_under_lock(task: int) -> bytes:
    with LOCK:
        return tt.encode_example({"task": [task]})
