"""The system programs some tests need, found or why not: Debian's chromium (the viewer's page, the
docs' screenshot) and Java (Spark). ``TORCH_TFRECORD_HIDE`` (torch_tfrecord/support/optional.py)
hides them as a machine without them has them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from torch_tfrecord.support import optional

__all__ = ["CHROMIUM", "missing"]

# Debian's chromium (``apt-get install chromium``; never ``playwright install``).
CHROMIUM = "/usr/bin/chromium"


def missing(name: str) -> str | None:
    """Why the program ``name`` ("chromium" or "java") cannot be used here; None: it can."""
    if optional.hidden(name):
        return f"needs {optional.why_hidden(name)}"
    if name == "chromium":
        found = Path(CHROMIUM).exists()
        return None if found else f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)"
    if name == "java":
        return _java_missing()
    raise KeyError(f"{name!r}: no check for that program")


def _java_missing() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java") or (os.path.join(home, "bin", "java") if home else None)
    if java is None or not os.path.exists(java):
        return "needs Java 17 or later (Spark 4 runs on it), none found: apt-get install default-jre-headless"
    found = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    return None if found else f"needs Java 17 or later: {java} -version said nothing"
