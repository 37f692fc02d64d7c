"""Bounded memory at scale: a billion-record dataset, and 20 epochs with persistent workers.

Both run the benchmark scripts (benchmarks/bench_scale.py, benchmarks/soak.py) in a fresh
process and check their memory figures; the timings they also print are for the benchmarks'
tables, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(script: str, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--json", *args],
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return dict(json.loads(result.stdout.decode().splitlines()[-1]))


def test_a_billion_records_in_bounded_memory() -> None:
    """1,000 shards x 1,000,000 records: what the library adds to the interpreter stays under 200 MB.

    ``import torch`` alone takes 223 MB (CPU build) to 505 MB (CUDA build) of RSS, so the
    figure checked is the peak over that baseline, in the main process and in each worker.
    """
    report = _run("bench_scale.py")
    baseline = report["baseline_mb"]
    for row in report["rows"]:
        assert row["records"] == 10**9
        assert row["main_peak_mb"] - baseline < 200, row
        if row["worker_peak_mb"] is not None:
            assert row["worker_peak_mb"] - baseline < 200, row
    print(report)


def test_soak_twenty_epochs_with_persistent_workers() -> None:
    report = _run("soak.py", "--epochs", "20", "--records", "20000", "--workers", "2")
    rows = report["rows"]
    assert len(rows) == 20 and {row["records"] for row in rows} == {19968}
    assert len({len(row["worker_mb"]) for row in rows}) == 1 and len(rows[0]["worker_mb"]) == 2
    growth = report["growth_epoch2_to_last"]
    assert all(value <= 0.05 for value in growth.values()), growth
    print(growth)
