"""The README's examples run as a user runs them: the built wheel installed in a fresh virtual
environment (CPU torch, no extras), each example alone in an empty directory, with only the
extras it names (``<!-- extras: ... -->`` above it) on top.

An example that leans on files an earlier one left, on the repository next to the installed
package, or on an extra it does not name fails here. The extras' own requirements are put beside
the environment (``pip install --target``, without their dependencies), one folder per extra, so
each example sees exactly the extras it names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomllib
from docblocks import ROOT, Block, blocks_of

README = ROOT / "README.md"
BLOCKS = [block for block in blocks_of(README) if block.skip is None]
TIMEOUT_S = 300
RUN = """
import sys
source = open(sys.argv[1]).read()
exec(compile("\\n" * (int(sys.argv[2]) - 1) + source, "README.md", "exec"), {"__name__": "__main__"})
"""


def _pip(python: Path, *args: str) -> None:
    # Without PYTHONPATH: pip would take a checkout on it for the package installed, and skip the wheel.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True, timeout=TIMEOUT_S, env=env)


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """A fresh venv with CPU torch and the built wheel; a folder of requirements per extra."""
    work = tmp_path_factory.mktemp("readme")
    wheels = work / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(wheels), str(ROOT)], check=True, timeout=TIMEOUT_S)
    (wheel,) = wheels.glob("torch_tfrecord-*.whl")
    venv.create(work / "venv", with_pip=True)
    python = work / "venv" / "bin" / "python"
    # The torch release this checkout is tested with (on this project's machines pip takes the
    # CPU build that lies on disk), then the package and its core dependencies.
    _pip(python, f"torch=={_torch_release()}")
    _pip(python, str(wheel))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    folders = {}
    for name in sorted({extra for block in BLOCKS for extra in block.extras}):
        folders[name] = work / "extras" / name
        _pip(python, "--no-deps", "--target", str(folders[name]), *extras[name])
    return python, folders


def _torch_release() -> str:
    import torch

    return torch.__version__.split("+")[0]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_a_readme_example_runs_in_a_fresh_environment(
    block: Block, environment: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    python, folders = environment
    (tmp_path / "_example.py").write_text(block.source)
    (tmp_path / "_run.py").write_text(RUN)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "VIRTUAL_ENV", "TORCH_TFRECORD"))
    }
    env["PYTHONPATH"] = os.pathsep.join(str(folders[extra]) for extra in block.extras)
    env["TFDS_DATA_DIR"] = str(shutil.copytree(ROOT / "tests" / "data" / "tfds", tmp_path / "tfds"))
    result = subprocess.run(
        [str(python), "_run.py", "_example.py", str(block.line)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, f"README.md:{block.line} failed:\n{result.stdout}\n{result.stderr}"


def test_the_examples_that_need_extras_name_them() -> None:
    """Each block that imports an optional library names an extra that brings it."""
    needs = {"PIL": {"vision", "convert"}, "rapidgzip": {"compressed"}, "ray": {"ray"}, "fsspec": {"remote"}}
    for block in BLOCKS:
        for module, extras in needs.items():
            if f"import {module}" in block.source or f"from {module}" in block.source:
                assert extras & set(block.extras), f"README.md:{block.line} imports {module}"
