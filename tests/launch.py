"""Process trees that tests start (torchrun and its ranks, an example and its DataLoader workers),
always taken down whole.

``subprocess.run(..., timeout=)`` kills only the process it started: torchrun's ranks run in
sessions of their own (torch's elastic agent starts them with ``start_new_session``), keep running
as orphans, and a rank blocked in a collective ignores SIGTERM. So each tree here starts in a new
session, every process in it carries a mark in its environment (inherited through any fork, exec
or new session), and stopping it sends SIGTERM to the launcher's group (torchrun then stops its
ranks), waits a grace period, and SIGKILLs every process that still carries the mark. A tree is
stopped on a timeout, and swept after a normal exit too (an orphan left by a rank).

Timeouts are for hangs, not for speed: generous, and each below pytest's own (600 s in
pyproject.toml), whose thread method ends the whole pytest process without this cleanup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

MARK = "TORCH_TFRECORD_TEST_TREE"


def marked(token: str) -> list[int]:
    """The processes of this user whose environment carries the tree's mark."""
    needle = f"{MARK}={token}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def start(
    command: Sequence[str], env: Mapping[str, str] | None = None, **options: Any
) -> subprocess.Popen[str]:
    """``command`` in a new session, every process of its tree marked (the mark: ``process.tree``)."""
    token = uuid.uuid4().hex
    options.setdefault("text", True)
    marked_env = {**(env or os.environ), MARK: token}
    process = subprocess.Popen(list(command), env=marked_env, start_new_session=True, **options)
    process.tree = token  # type: ignore[attr-defined]
    return process


def stop(process: subprocess.Popen[str], grace_s: float = 15.0) -> None:
    """SIGTERM to the launcher's group, then after ``grace_s`` SIGKILL to every marked process left."""
    token: str = process.tree  # type: ignore[attr-defined]
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while marked(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    for _ in range(10):  # a process forking while being killed: kill until none is left
        left = marked(token)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def tree(command: Sequence[str], **options: Any) -> Iterator[subprocess.Popen[str]]:
    """:func:`start`, and :func:`stop` however the block ends."""
    process = start(command, **options)
    try:
        yield process
    finally:
        stop(process, grace_s=0.0 if process.poll() is not None else 15.0)


def dump_stacks(process: subprocess.Popen[str], signal_number: int, wait_s: float = 3.0) -> None:
    """``signal_number`` to every process of the tree but its launcher (each registered
    ``faulthandler`` for it, so each writes its threads' stacks to its stderr), then ``wait_s``."""
    for pid in marked(process.tree):  # type: ignore[attr-defined]
        if pid != process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal_number)
    time.sleep(wait_s)


def run(
    command: Sequence[str], timeout_s: float, dump_signal: int | None = None, **options: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True)``, the whole tree taken down at the
    end; a timeout fails the test with the output so far. The output goes through files, not pipes:
    an orphan that kept the pipes open would hold the reader until it ended. With ``dump_signal``
    (which the tree's processes but the launcher handle with ``faulthandler``), a hung tree's
    stacks are in that output."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        with tree(command, stdout=stdout, stderr=stderr, **options) as process:
            try:
                process.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                if dump_signal is not None:
                    dump_stacks(process, dump_signal)
                stop(process)
                timed_out = True
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    if timed_out:
        pytest.fail(
            f"{' '.join(command)} did not finish within {timeout_s} s (a hang): its whole process tree "
            f"was stopped\n{out[-2000:]}\n{err[-(40000 if dump_signal is not None else 4000) :]}"
        )
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)
