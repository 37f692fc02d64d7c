"""The hints for a missing optional extra: a pip command that works for how this copy was installed."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

import torch_tfrecord as tt
from torch_tfrecord.convert import _images
from torch_tfrecord.support import extras as _extras
from torch_tfrecord.support.extras import hint_for, install_hint
from torch_tfrecord.vision import preview

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [ROOT / "torch_tfrecord", ROOT / "index_tools"]


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        (None, "pip install 'torch-tfrecord[remote]'"),  # from a package index
        (
            {"url": "file:///home/me/torch-tfrecord", "dir_info": {}},
            "pip install '/home/me/torch-tfrecord[remote]'",
        ),
        (
            {"url": "file:///home/me/my%20clone", "dir_info": {"editable": True}},
            "pip install -e '/home/me/my clone[remote]'",
        ),
        (
            {
                "url": "https://github.com/someone/torch-tfrecord.git",
                "vcs_info": {"vcs": "git", "requested_revision": "main", "commit_id": "0123abc"},
            },
            "pip install 'torch-tfrecord[remote] @ git+https://github.com/someone/torch-tfrecord.git@0123abc'",
        ),
        (
            {
                "url": "https://example.com/monorepo.git",
                "vcs_info": {"vcs": "git", "commit_id": "0123abc"},
                "subdirectory": "python/tfr",
            },
            "pip install 'torch-tfrecord[remote] @ "
            "git+https://example.com/monorepo.git@0123abc#subdirectory=python/tfr'",
        ),
        (
            {"url": "file:///tmp/dist/torch_tfrecord-0.1.0-cp311-cp311-linux_x86_64.whl", "archive_info": {}},
            "pip install 'torch-tfrecord[remote] @ file:///tmp/dist/torch_tfrecord-0.1.0-cp311-cp311-linux_x86_64.whl'",
        ),
    ],
)
def test_hint_follows_how_the_package_was_installed(direct_url: dict[str, Any] | None, command: str) -> None:
    assert hint_for("remote", None, direct_url) == f"install the 'remote' extra: {command}"


def test_hint_from_a_source_checkout_installs_its_extra_editable(tmp_path: Path) -> None:
    # Whatever pip recorded (another install), the code that runs is the checkout's.
    recorded = {"url": "file:///elsewhere", "dir_info": {}}
    assert hint_for("vision", tmp_path / "a b", recorded) == (
        f"install the 'vision' extra: pip install -e '{tmp_path}/a b[vision]'"
    )
    assert install_hint("vision") == f"install the 'vision' extra: pip install -e '{ROOT}[vision]'"


def test_every_hint_names_an_extra_of_the_project() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {
        extra
        for package in PACKAGES
        for path in package.rglob("*.py")
        for extra in re.findall(r"install_hint\(['\"](\w+)['\"]\)", path.read_text())
    }
    expected = {
        *("arrow", "audio", "coco", "compressed", "convert", "fastjpeg"),
        *("beam", "hf", "ray", "remote", "spark", "view", "vision"),
    }
    assert named == expected
    assert named <= set(extras)


def test_no_hint_bypasses_the_helper() -> None:
    """A hard-coded ``pip install 'torch-tfrecord[...]'`` fails for everyone who installed from source."""
    hard_coded = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in PACKAGES
        for path in package.rglob("*.py")
        if path.name != "extras.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"pip install .?torch-tfrecord", line)
    ]
    assert hard_coded == []


def _without_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PIL", "PIL.Image", "PIL.ImageDraw", "PIL.ImageFont"):
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_pillow_in_preview_and_convert_gives_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_pillow(monkeypatch)
    hint = re.escape(install_hint("convert"))
    with pytest.raises(ImportError, match=f"^preview needs Pillow; {hint}$"):
        preview.render_grid([tt.encode_example({"a": 1})])
    with pytest.raises(ImportError, match=f"^converting images needs Pillow; {hint}$"):
        _images.pillow()


def test_unreadable_install_record_falls_back_to_the_package_name(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def read_text(self, name: str) -> str:
            return "{not json"

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Broken())
    assert _extras._direct_url() is None
