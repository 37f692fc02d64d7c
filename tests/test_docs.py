"""The documentation is tested like code: the site builds with --strict, and every Python block runs.

Each page's ```python blocks (docs/**/*.md and README.md) run in order, sharing one namespace as
a reader typing them in one session would, in a subprocess, in a fresh temporary directory (the
blocks write out/, data/, photos/ relative to it), with ``__name__ == "__main__"``. A block that
needs what a test cannot have (a server, a GPU, files another program writes) is preceded by
``<!-- skip: why -->`` and is reported as skipped with that reason. Tracebacks point at the page
and its line.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from docblocks import RUNNER, Block, blocks_of
from system_programs import missing

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
BLOCK_TIMEOUT_S = 300  # a page's blocks together; the slowest page (training, conversion) takes ~15 s
BUILD_CPU_LIMIT_S = 30  # the whole site builds in about 6 CPU seconds; 30 means something is wrong


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


PAGES_WITH_CODE = [page for page in PAGES if blocks_of(page)]


def test_the_docs_have_code_to_run() -> None:
    # The collector itself: a fence it stopped recognising would quietly run nothing.
    assert {"README.md", "docs/getting-started.md", "docs/concepts.md"} <= {
        _page_id(p) for p in PAGES_WITH_CODE
    }
    runnable = [b for page in PAGES for b in blocks_of(page) if b.skip is None]
    assert len(runnable) >= 20, runnable


def test_every_block_parses() -> None:
    """Cheap and whole: a syntax error anywhere (skipped blocks included) fails here first."""
    for page in PAGES:
        for block in blocks_of(page):
            try:
                ast.parse(block.source)
            except SyntaxError as error:
                pytest.fail(f"{block.page}:{block.line + (error.lineno or 1) - 1}: {error.msg}")


def test_skip_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- skip: needs S3 -->\n```python\nimport s3\n```\n\n```python\nx = 1\n```\n")
    assert [(b.line, b.source, b.skip) for b in blocks_of(page, tmp_path)] == [
        (3, "import s3\n", "needs S3"),
        (7, "x = 1\n", None),
    ]
    page.write_text("<!-- skip: needs S3 -->\nsome prose\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="just before"):
        blocks_of(page, tmp_path)
    page.write_text("<!-- skip: needs S3 -->\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="bash block"):
        blocks_of(page, tmp_path)
    page.write_text("<!-- extras: vision, remote -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n")
    assert [(b.line, b.skip, b.extras) for b in blocks_of(page, tmp_path)] == [
        (3, None, ("vision", "remote")),
        (7, None, ()),
    ]


def _python_env() -> dict[str, str]:
    # TFDS_DATA_DIR: where the pages find a TFDS-prepared directory (TFDS reads the same variable).
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": pythonpath, "TFDS_DATA_DIR": str(ROOT / "tests" / "data" / "tfds")}


def run_blocks(blocks: list[Block], workdir: Path) -> subprocess.CompletedProcess[str]:
    script = workdir / "_docs_runner.py"
    script.write_text(RUNNER)
    (workdir / "_blocks.json").write_text(json.dumps([dataclasses.asdict(b) for b in blocks]))
    return subprocess.run(
        [sys.executable, str(script), str(workdir / "_blocks.json")],
        cwd=workdir,
        env=_python_env(),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


def test_a_failing_block_names_its_page_and_line(tmp_path: Path) -> None:
    blocks = [
        Block("docs/page.md", 3, "x = 1\n", None),
        Block("docs/page.md", 10, "y = x\nraise KeyError(y)\n", None),
    ]
    result = run_blocks(blocks, tmp_path)
    assert result.returncode != 0
    assert 'File "docs/page.md", line 11' in result.stderr and "KeyError: 1" in result.stderr


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_page_id)
def test_page_code_runs(page: Path, tmp_path: Path) -> None:
    runnable = [b for b in blocks_of(page) if b.skip is None]
    if not runnable:
        pytest.skip("every block of the page is marked (see test_marked_block)")
    absent = {why for b in runnable for program in b.needs if (why := missing(program))}
    if absent:  # the page's blocks share one namespace: without one of them, none runs
        pytest.skip("; ".join(sorted(absent)))
    result = run_blocks(runnable, tmp_path)
    assert result.returncode == 0, f"{_page_id(page)} failed:\n{result.stdout}\n{result.stderr}"


MARKED = [b for page in PAGES for b in blocks_of(page) if b.skip is not None]


@pytest.mark.parametrize("block", MARKED, ids=[f"{b.page}:{b.line}" for b in MARKED])
def test_marked_block(block: Block) -> None:
    """Each block marked <!-- skip: why --> shows in the summary of skips, with its reason."""
    pytest.skip(block.skip)


def test_partition_picture_is_what_the_code_draws() -> None:
    """docs/images/partition.svg is drawn by partition.py from torch_tfrecord.data.order.plan: rerun it."""
    script = DOCS / "images" / "partition.py"
    spec = importlib.util.spec_from_file_location("partition_picture", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (DOCS / "images" / "partition.svg").read_text() == module.draw(), (
        "docs/images/partition.svg is stale: run python docs/images/partition.py"
    )
    # What the picture shows is the dataset's promise: each record once per epoch, padding aside.
    seen = [
        record
        for plan in module.plans()
        for worker in range(module.NUM_WORKERS)
        for _, ids, padding in module.worker_batches(plan, worker)
        for record, pad in zip(ids, padding, strict=True)
        if not pad
    ]
    assert sorted(seen) == list(range(sum(module.SHARD_SIZES)))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with mkdocs build --strict: a broken link, anchor, reference or docstring
    fails the build."""
    site = tmp_path_factory.mktemp("docs") / "site"
    started = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**_python_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    # CPU seconds, not wall time, so a loaded machine does not fail it (about 6 s here).
    finished = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = finished.ru_utime + finished.ru_stime - started.ru_utime - started.ru_stime
    assert seconds < BUILD_CPU_LIMIT_S, f"the site took {seconds:.1f} CPU seconds to build"
    return site


def test_site_builds_strict(site: Path) -> None:
    import torch_tfrecord

    api = (site / "reference" / "api" / "index.html").read_text()
    for name in torch_tfrecord.__all__:  # every public name has its entry, under its own name
        assert re.search(rf'id="torch_tfrecord\.(?:[a-z_]+\.)+{name}"', api), name
    assert ":class:" not in api and ":func:" not in api  # Sphinx roles are rewritten
    cli = (site / "reference" / "torch-tfrecord" / "index.html").read_text()
    assert "torch-tfrecord convert image-folder" in cli and "--on-error" in cli
    assert "torch-tfrecord convert from-parquet" in cli and "--rows-per-file" in cli
    index_cli = (site / "reference" / "tfrecord-index" / "index.html").read_text()
    assert "--verify-crc" in index_cli
    assert "partition.svg" in (site / "concepts" / "index.html").read_text()
    assert (site / "images" / "partition.svg").is_file()
    assert not list(site.rglob("*.py")), "the hooks and the picture's script are not pages"


@pytest.mark.skipif(missing("chromium") is not None, reason=str(missing("chromium")))
def test_concepts_page_shows_the_picture(site: Path, tmp_path: Path) -> None:
    """A headless browser renders the concepts page with the partition picture in it.

    Optional (CI machines have no chromium): the pixels of the picture's three shard colours
    must be on the screenshot, which they are only when the SVG loaded and was drawn.
    """
    from PIL import Image

    screenshot = tmp_path / "concepts.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={screenshot}",
            "--window-size=1280,6000",
            (site / "concepts" / "index.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = np.asarray(Image.open(screenshot).convert("RGB")).reshape(-1, 3)
    for colour in ((0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0x59, 0xA1, 0x4F)):  # partition.py's COLOURS
        assert (pixels == colour).all(axis=1).sum() > 500, f"no shard colour {colour} on the page"
