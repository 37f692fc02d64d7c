"""``torch-tfrecord view`` started for real in a child process, for the viewer's tests and benchmark.

The child runs with torch made unimportable (``sys.modules["torch"] = None``): every page the tests
open proves the viewer never needs torch.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from system_programs import CHROMIUM

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "running_viewer"]

# Debian's chromium (system_programs.CHROMIUM), kept off the network.



CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

ROOT = Path(__file__).resolve().parent.parent
_WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None\n"
    "from torch_tfrecord.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))"
)


@contextlib.contextmanager
def running_viewer(
    *args: str, timeout: float = 30.0, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Starts ``torch-tfrecord view ARGS`` (with ``env`` added to the environment); yields the URL
    it printed and the process, then stops it with SIGINT (by its PID) and waits for it."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    process = subprocess.Popen(
        [sys.executable, "-c", _WITHOUT_TORCH, "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"(http://\S+)", line)
        if not found:
            process.kill()
            raise RuntimeError(
                f"the viewer printed {line!r}; stderr: {process.communicate(timeout=timeout)[1]}"
            )
        yield found[1], process
    finally:
        if process.poll() is None:
            process.send_signal(2)  # SIGINT, as Ctrl-C
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
