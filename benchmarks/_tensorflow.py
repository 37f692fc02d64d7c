"""Running a peer script under another Python that has TensorFlow (a scratch venv)."""

from __future__ import annotations

import os
import subprocess


def run_script(tf_python: str, script: str, *args: str) -> list[str]:
    """Runs ``script`` with ``tf_python`` on the CPU, TensorFlow's logging off; its stdout, split."""
    result = subprocess.run(
        [tf_python, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    return result.stdout.split()
