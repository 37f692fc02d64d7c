"""The fuzz harnesses under fuzz/: their corpora replay clean, and a short run of each finds nothing.

The short run lasts ``TORCH_TFRECORD_FUZZ_SECONDS`` (default 60) per harness, all harnesses at
once; longer runs are made by hand (fuzz/README.md). Every input a run ever found is committed
to the harness's corpus (``regression-*``) and replayed here.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"
HARNESSES = [
    "native",
    "reader",
    "decoder",
    "index",
    "spec",
    # the side files and what a crafted dataset or cache directory holds (issue 44)
    "cidx",
    "spec_json",
    "tfds_info",
    "label_map",
    "parquet_metadata",
    "cache_meta",
    "wire",
    "manifest",  # a dataset's manifest (issue 45)
    "query",  # the filter a web page sends the viewer (issue 54)
]


@pytest.fixture
def harnesses() -> Iterator[None]:
    sys.path.insert(0, str(FUZZ))
    try:
        yield
    finally:
        sys.path.remove(str(FUZZ))


def _harness(name: str) -> ModuleType:
    return importlib.import_module(f"fuzz_{name}")


@pytest.mark.parametrize("name", HARNESSES)
def test_corpus_replays_clean(name: str, harnesses: None) -> None:
    """Seeds and past findings: every input decodes or is refused with a TFRecordError."""
    module = _harness(name)
    corpus = FUZZ / "corpus" / name
    committed = {path.name: path.read_bytes() for path in corpus.iterdir()}
    assert module.seeds() == {key: committed.get(key) for key in module.seeds()}, "seeds not committed"
    for data in committed.values():
        module.check(data)


def test_regressions_are_kept() -> None:
    """What the fuzzers found stays in the corpora (each a bug fixed in this library)."""
    found = sorted(p.relative_to(FUZZ / "corpus").as_posix() for p in FUZZ.glob("corpus/*/regression-*"))
    assert len(found) >= 19, found


@pytest.mark.timeout(0)  # TORCH_TFRECORD_FUZZ_SECONDS may be long; the runs have their own limit
def test_short_fuzz_runs(tmp_path: Path) -> None:
    """Every harness fuzzed at once for a while: none finds an input that breaks its rules."""
    pytest.importorskip("atheris")
    seconds = int(os.environ.get("TORCH_TFRECORD_FUZZ_SECONDS", "60"))
    runs = {}
    for name in HARNESSES:
        work = tmp_path / name
        work.mkdir()
        log = (tmp_path / f"{name}.log").open("wb")
        command = [
            sys.executable,
            str(FUZZ / f"fuzz_{name}.py"),
            str(work),
            str(FUZZ / "corpus" / name),
            f"-max_total_time={seconds}",
            f"-artifact_prefix={tmp_path}/{name}-",
            "-rss_limit_mb=4096",
        ]
        runs[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path), log)
    failures, executions = [], {}
    for name, (process, log) in runs.items():
        code = process.wait(timeout=seconds + 240)
        log.close()
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        done = re.search(r"Done (\d+) runs", text)
        if code != 0 or done is None:
            failures.append(f"fuzz_{name} exited {code}:\n{text[-3000:]}")
        else:
            executions[name] = int(done.group(1))
    print("executions per harness:", executions)
    assert not failures, "\n\n".join(failures)
    assert not list(tmp_path.glob("*-crash-*")) and not list(tmp_path.glob("*-oom-*"))
    assert all(count >= 500 for count in executions.values()), executions
