"""workers: what DataLoader workers forked from the main process inherit instead of redoing."""

from __future__ import annotations

import subprocess
import sys


def test_the_dataset_imports_numpy_random_before_workers_fork() -> None:
    # torch's worker loop seeds numpy.random in every worker: imported in the main process once,
    # each forked worker of each epoch skips a 12 ms import.
    code = "import sys, torch_tfrecord as tt; tt.TFRecordDataset; print('numpy.random' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
