"""What the tests of the loader axis share (threads in the main process, one loading process):
the transforms they run, a damaged record, and the checks that nothing of a loop is left behind."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import torch_tfrecord as tt

THREADS = "torch_tfrecord-load"  # the loading threads' names start so
PROCESS = "torch_tfrecord-loading"  # the loading process's name


def loading_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(THREADS)]


def no_thread_left() -> None:
    gc.collect()
    deadline = time.monotonic() + 10
    while loading_threads():
        assert time.monotonic() < deadline, f"threads left running: {loading_threads()}"
        time.sleep(0.01)


def children() -> list[multiprocessing.process.BaseProcess]:
    return [child for child in multiprocessing.active_children() if child.name == PROCESS]


def no_process_left() -> None:
    gc.collect()
    deadline = time.monotonic() + 10
    while children():
        assert time.monotonic() < deadline, f"loading processes left: {children()}"
        time.sleep(0.02)


def nothing_left() -> None:
    """No loading thread here and no loading process."""
    no_thread_left()
    no_process_left()


def ids(batches: Iterator[Any]) -> list[list[int]]:
    return [torch.as_tensor(batch["_record_id"]).reshape(-1).tolist() for batch in batches]


def augment(batch: dict[str, Any]) -> dict[str, Any]:
    batch["noise"] = torch.rand(3)  # torch's global RNG, seeded per batch by the dataset
    return batch


def augment_with(batch: dict[str, Any], generator: torch.Generator) -> dict[str, Any]:
    batch["noise"] = torch.rand(3, generator=generator)
    return batch


def raising(batch: dict[str, Any]) -> dict[str, Any]:
    if 17 in batch["_record_id"].tolist():
        raise RuntimeError("the transform failed on record 17")
    return batch


def raising_with(batch: dict[str, Any], generator: torch.Generator) -> dict[str, Any]:
    return raising(batch)


def damage_payload(path: Path, record: int) -> None:
    """Flips a byte of ``record``'s payload (its CRC then fails)."""
    table = tt.load_index(tt.default_index_path(path))
    data = bytearray(path.read_bytes())
    data[int(table[record, 0]) + 12] ^= 0xFF
    path.write_bytes(bytes(data))
