"""The hint an error gives when an optional extra is missing: a pip command that works for this copy.

torch-tfrecord is not on a package index yet, so ``pip install 'torch-tfrecord[remote]'`` fails for
most users. The command follows how this copy was installed: from a source checkout (editable, or
on ``PYTHONPATH``) its folder, from a git URL that URL at the installed commit, from an archive that
archive, all as pip recorded them (``direct_url.json``, PEP 610); from a package index, the name.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["hint_for", "install_command", "install_hint"]

DISTRIBUTION = "torch-tfrecord"

_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # torch_tfrecord/support/extras.py


def install_hint(extra: str) -> str:
    """``"install the 'remote' extra: pip install ..."``, with the command for this copy."""
    return hint_for(extra, _checkout(), _direct_url())


def install_command(extra: str) -> str:
    """``"pip install ..."`` that installs ``extra`` for this copy (see :func:`install_hint`)."""
    return f"pip install {_requirement(extra, _checkout(), _direct_url())}"


def hint_for(extra: str, checkout: Path | None, direct_url: Mapping[str, Any] | None) -> str:
    """The hint for ``extra`` when this copy runs from ``checkout`` (a source tree) or else was
    installed as ``direct_url`` says (None: from a package index)."""
    return f"install the {extra!r} extra: pip install {_requirement(extra, checkout, direct_url)}"


def _requirement(extra: str, checkout: Path | None, direct_url: Mapping[str, Any] | None) -> str:
    if checkout is not None:  # the code that runs is this folder's: its extra, kept editable
        return f"-e {shlex.quote(f'{checkout}[{extra}]')}"
    url = (direct_url or {}).get("url")
    if direct_url is None or not isinstance(url, str):
        return shlex.quote(f"{DISTRIBUTION}[{extra}]")
    if "dir_info" in direct_url and url.startswith("file:"):
        editable = "-e " if direct_url["dir_info"].get("editable") else ""
        return editable + shlex.quote(f"{unquote(urlparse(url).path)}[{extra}]")
    if "vcs_info" in direct_url:
        vcs = direct_url["vcs_info"]
        url = f"{vcs['vcs']}+{url}@{vcs['commit_id']}"
    if "subdirectory" in direct_url:
        url += f"#subdirectory={direct_url['subdirectory']}"
    return shlex.quote(f"{DISTRIBUTION}[{extra}] @ {url}")


def _checkout() -> Path | None:
    """The source tree this copy runs from, if it does (not when installed into site-packages)."""
    try:
        pyproject = (_SOURCE_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return _SOURCE_ROOT if f'name = "{DISTRIBUTION}"' in pyproject else None


def _direct_url() -> dict[str, Any] | None:
    """What pip recorded about where this distribution came from; None for a package index."""
    from importlib import metadata  # 20-30 ms: only when an error needs it, not on every CLI start

    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
