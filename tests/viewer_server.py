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

from torch_tfrecord.support import optional

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "chromium_missing", "running_viewer"]

# Debian's chromium (``apt-get install chromium``; never ``playwright install``), kept off the network.
CHROMIUM = "/usr/bin/chromium"


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can): no chromium, or TORCH_TFRECORD_HIDE."""
    if optional.hidden("chromium"):
        return f"needs {optional.why_hidden('chromium')}"
    if not Path(CHROMIUM).exists():
        return f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)"
    return None


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
