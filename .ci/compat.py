"""The compatibility matrix: one venv per stack, built from the package index, and a named slice of the
suite run in each. Not part of .ci/run (it takes an hour or more): run it by hand when a floor moves or a
new release of torch, numpy or a framework is claimed.

    python .ci/compat.py                          # every stack, every slice
    python .ci/compat.py --stacks floor --slices records,codec
    python .ci/compat.py --render                 # only regenerate from the saved results

Each stack installs the package from a copy of the files git tracks (or would) with its pins, so a pin
that the declared bounds refuse fails the install, as a user's would. The ``floor`` stack pins every
package of FLOORED at the lower bound that pyproject.toml declares: that the floors are honest is what it
checks. The tests then run from the copy with its own ``torch_tfrecord/`` removed, so they import what
was installed (with its compiled extension), one slice at a time, on about one core (no pytest -n,
OMP_NUM_THREADS=1). Each stack runs its own slices (STACKS), or those --slices names.

Writes docs/supported-versions.json (merged: a run of some stacks replaces only those), from which
the docs' "Supported versions" page is rendered (docs/_hooks/supported_versions.py) and
torch_tfrecord/support/tested_versions.py is generated (the version checks read it). venvs live under
--cache (default /tmp/torch-tfrecord-compat), one at a time unless --keep; packages come through uv (from
PATH, else installed into the cache), whose cache hard-links torch into each venv.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "supported-versions.json"
TESTED_MODULE = ROOT / "torch_tfrecord" / "support" / "tested_versions.py"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"

# The named slices of the suite: pytest arguments (test files, node ids, -k / --deselect).
_S3_COMPRESSED = "tests/test_compressed.py::test_compressed_shards_on_s3_read_as_local_ones"
SLICES: dict[str, list[str]] = {
    "records": [
        "tests/test_framing.py", "tests/test_reader.py", "tests/test_writer.py", "tests/test_index.py",
        "tests/test_io.py", "tests/test_resync.py", "tests/test_compressed.py", "tests/test_native.py",
        "--deselect", _S3_COMPRESSED,  # (in "remote")
    ],
    "codec": [
        "tests/test_codec.py", "tests/test_spec.py", "tests/test_encode.py", "tests/test_ragged.py",
        "tests/test_schema.py", "tests/test_payloads.py", "tests/test_collate.py",
    ],
    "dataset": [
        "tests/test_dataset.py", "tests/test_order.py", "tests/test_selection.py", "tests/test_mix.py",
        "tests/test_epochs.py", "tests/test_prefetch.py",
    ],
    "loader": [
        "tests/test_loader.py", "tests/test_workers.py", "tests/test_handoff.py", "tests/test_byte_ring.py",
        "tests/test_internals.py", "tests/test_versions.py",
    ],
    "ddp": ["tests/test_distributed.py", "tests/test_elastic.py", "tests/test_distributed_compressed.py"],
    "frameworks": ["tests/test_frameworks.py", "tests/test_wrapped.py"],
    "remote": ["tests/test_remote.py", "tests/test_cache.py", _S3_COMPRESSED],
    "vision": ["tests/test_vision.py"],
}  # fmt: skip

# Packages whose versions a stack reports (and from which tested_versions.py is made).
REPORTED = [
    "torch", "numpy", "protobuf", "accelerate", "transformers", "lightning", "torchdata", "torchvision",
]  # fmt: skip
# The packages the floor stack pins at pyproject.toml's lower bound (from any extra that declares one).
# (accelerate's and transformers' floors are the lowest releases a stack ran their tests green with,
# which tests/test_compat.py checks against the results.)
FLOORED = [
    "torch", "numpy", "protobuf", "crc32c", "lightning", "torchdata", "torchvision", "pillow", "fsspec",
    "s3fs", "gcsfs",
]  # fmt: skip
# The suite's own limit on a process group (tests/gloo.py): such a test proved nothing either way (on a
# loaded machine, a slow start); it is shown as timed out, and is not held against a claim.
HANG = re.compile(r"did not finish within \d+ s \(a hang\)")
# A failed test whose first parameter is one of these words runs through that framework.
FRAMEWORK_TESTS = {
    "accelerate": ("accelerate",), "transformers": ("trainer",), "lightning": ("lightning", "fabric"),
    "torchdata": ("stateful",),
}  # fmt: skip
# What the tests need besides the package and its extras, in every stack (not claims: tools).
TOOLS = [
    "pytest", "pytest-timeout", "hypothesis", "moto[server]>=5", "gcp-storage-emulator>=2024.8",
    "accelerate", "transformers", "lightning", "torchdata", "torchvision",
]  # fmt: skip

# The stacks: name -> (CPython version, pins, the slices it runs). "floor" pins FLOORED at the declared
# lower bounds. Every stack runs "loader" (torch's internals and the version check), all but py3.12
# "frameworks"; the floor every slice but remote. The others run few, to fit one session on a 2-core
# machine under a load of 10 or more (the whole matrix then takes about two hours); --slices runs more.
_EVERYWHERE = ["loader", "frameworks"]
_ALL = ["codec", "dataset", "loader", "frameworks", "ddp", "records", "remote", "vision"]
STACKS: dict[str, tuple[str, list[str], list[str]]] = {
    # not remote: an s3 read by 2 DataLoader workers hung there (fsspec 2023.6 and 2024.6 alike)
    "floor": ("3.10", [], [s for s in _ALL if s != "remote"]),
    "middle": ("3.11", [
        "torch==2.6.0", "numpy==1.26.4", "torchvision==0.21.0", "accelerate==1.6.0", "transformers==4.57.6",
        "lightning==2.5.1", "torchdata==0.11.0",
    ], _EVERYWHERE),
    "py3.12": ("3.12", [
        "torch==2.9.1", "numpy==2.1.3", "torchvision==0.24.1", "accelerate==1.10.1", "transformers==5.0.0",
        "lightning==2.5.6", "torchdata==0.11.0",
    ], ["loader"]),
    # the newest of everything else
    "newest": ("3.13", ["torch==2.15.0"], [*_EVERYWHERE, "codec"]),
}  # fmt: skip


def floor_pins(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``name==X`` for each package of FLOORED that pyproject.toml bounds below by ``>=X``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*>=\s*([0-9][0-9a-z.]*)", requirement)
        if match and match[1].lower() in FLOORED:
            pins.setdefault(match[1].lower(), f"{match[1].lower()}{match[2] or ''}=={match[3]}")
    missing = sorted(set(FLOORED) - set(pins))
    if missing:
        raise SystemExit(f"pyproject.toml declares no lower bound for {', '.join(missing)}")
    return [pins[name] for name in FLOORED]


def stack_pins(name: str) -> list[str]:
    pins = STACKS[name][1]
    return floor_pins() if name == "floor" else pins


def parse_junit(path: Path) -> dict[str, Any]:
    """passed / failed / skipped of a pytest junit XML file (errors count as failed), and what failed."""
    if not path.exists():  # pytest died before writing it (collection crashed the interpreter ...)
        return {"passed": 0, "failed": 1, "skipped": 0, "failures": [f"{path.name}: no results"]}
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ElementTree.parse(path).getroot()
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    failures, timeouts = [], []
    for case in root.iter("testcase"):
        found = case.find("failure") if case.find("failure") is not None else case.find("error")
        if found is not None:
            text = f"{found.get('message', '')}\n{found.text or ''}"
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            (timeouts if HANG.search(text) else failures).append(test)
    failed = counts["failures"] + counts["errors"]
    skipped = counts["skipped"]
    passed = counts["tests"] - failed - skipped
    return dict(passed=passed, failed=failed, skipped=skipped, failures=failures, timeouts=timeouts)


def _uv(cache: Path) -> str:
    found = shutil.which("uv")
    if found:
        return found
    tool = cache / "uv-tool"
    if not (tool / "bin" / "uv").exists():
        subprocess.run([sys.executable, "-m", "venv", str(tool)], check=True)
        subprocess.run([str(tool / "bin" / "pip"), "install", "-q", "uv"], check=True)
    return str(tool / "bin" / "uv")


def _copy_tree(target: Path) -> None:
    """The files git tracks, or would (untracked, not ignored), copied to ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    shutil.rmtree(target, ignore_errors=True)
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def build(name: str, cache: Path, log: Path, pins: list[str]) -> tuple[Path, Path]:
    """The stack's venv (with the package and the test tools installed) and the copy the tests run from."""
    python_version = STACKS[name][0]
    interpreters = sorted(PYENV.glob(f"{python_version}.*/bin/python3"))
    if not interpreters:
        raise SystemExit(f"no CPython {python_version} under {PYENV}")
    uv, venv, source = _uv(cache), cache / f"venv-{name}", cache / f"src-{name}"
    _copy_tree(source)
    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv-cache"), "VIRTUAL_ENV": str(venv)}
    with log.open("a") as out:
        subprocess.run([uv, "venv", "-q", "--clear", "-p", str(interpreters[-1]), str(venv)],
                       check=True, stdout=out, stderr=out)  # fmt: skip
        install = [uv, "pip", "install", f"{source}[remote,vision]", *pins, *TOOLS]
        out.write(f"+ {' '.join(install)}\n")
        out.flush()
        subprocess.run(install, check=True, stdout=out, stderr=out, env=env)
    for package in ("torch_tfrecord", "index_tools"):  # the tests import what was installed
        shutil.rmtree(source / package)
    return venv, source


def installed_versions(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform, sys\n"
        "found = {'python': platform.python_version()}\n"
        "for name in sys.argv[1:]:\n"
        "    try: found[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(found))"
    )
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-c", code, *REPORTED], capture_output=True, check=True)
    return dict(json.loads(done.stdout))


def run_slice(venv: Path, source: Path, slice_name: str, log: Path) -> dict[str, Any]:
    junit = source / f"junit-{slice_name}.xml"
    junit.unlink(missing_ok=True)
    command = [str(venv / "bin" / "pytest"), "-q", "-rfE", "--durations=5", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *SLICES[slice_name]]  # fmt: skip
    # the copy on the path, as python -m pytest would put it: spawned workers unpickle tests.* there
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VIRTUAL_ENV": str(venv), "PYTHONPATH": str(source)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"+ {' '.join(command)}\n")
        out.flush()
        subprocess.run(command, cwd=source, env=env, stdout=out, stderr=out)
    return {**parse_junit(junit), "seconds": round(time.monotonic() - started)}


def run_stack(
    name: str, slices: list[str] | None, cache: Path, keep: bool, pins: list[str] | None = None
) -> dict[str, Any]:
    pins = stack_pins(name) if pins is None else pins
    log = cache / f"{name}.log"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    print(f"[{name}] building (log: {log})", flush=True)
    try:
        venv, source = build(name, cache, log, pins)
    except subprocess.CalledProcessError:
        print(f"[{name}] install failed: see {log}", flush=True)
        return {"name": name, "python": STACKS[name][0], "pins": pins, "install_failed": True}
    done: dict[str, Any] = {"name": name, "pins": pins, "slices": {}}
    done["versions"] = installed_versions(venv)
    done["python"] = done["versions"].pop("python")
    for slice_name in slices or STACKS[name][2]:
        done["slices"][slice_name] = counts = run_slice(venv, source, slice_name, log)
        print(f"[{name}] {slice_name}: {counts}", flush=True)
    _add_up(done)
    done["wall_seconds"] = round(time.monotonic() - started)
    done["date"] = datetime.date.today().isoformat()
    done["loadavg"] = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else ""
    if not keep:
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    return done


def _add_up(stack: dict[str, Any]) -> None:
    for key in ("passed", "failed", "skipped", "seconds"):
        stack[key] = sum(counts[key] for counts in stack["slices"].values())


def blamed(failure: str) -> str | None:
    """The framework a failed test runs through (its first parameter names it), else None."""
    match = re.search(r"\[(\w+)", failure)
    word = match[1] if match else ""
    return next((name for name, words in FRAMEWORK_TESTS.items() if word in words), None)


def green(stack: dict[str, Any], package: str | None = None) -> bool:
    """Whether ``stack`` ran green: every test; with ``package``, for that package's claim ("": the claims
    of no framework): the tests of other frameworks may have failed (their own releases, not this
    library, at those versions), and tests may have timed out (HANG)."""
    if stack.get("install_failed") or not stack.get("slices"):
        return False
    slices = stack["slices"].values()
    if package is None:
        return all(counts["failed"] == 0 for counts in slices)
    if package in FRAMEWORK_TESTS and "frameworks" not in stack["slices"]:
        return False  # a framework is claimed where its tests ran
    failures = [f for counts in slices for f in counts.get("failures", ["?"] * counts["failed"])]
    return all(blamed(failure) not in (None, package) for failure in failures)


def _major_minor(version: str) -> str:
    return ".".join(re.findall(r"\d+", version)[:2])


def render_markdown(results: dict[str, Any]) -> str:
    """The table of a run: one row per stack (with the claims its failures leave out), then one per stack and
    slice (with the tests that failed)."""
    head = ["stack", "Python", *REPORTED, "passed", "failed", "skipped", "time", "not claimed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stack in results["stacks"]:
        versions = stack.get("versions", {})
        if stack.get("install_failed"):
            cells = [stack["name"], stack["python"], *("" for _ in REPORTED), "install failed", "", "", ""]
            cells.append("all")
        else:
            minutes = f"{stack['seconds'] // 60}m{stack['seconds'] % 60:02d}s"
            cells = [stack["name"], stack["python"], *(versions.get(name, "-") for name in REPORTED),
                     str(stack["passed"]), str(stack["failed"]), str(stack["skipped"]), minutes,
                     _left_out(stack)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| stack | slice | passed | failed | skipped | time | failed tests |", "|" + "---|" * 7]
    for stack in results["stacks"]:
        for slice_name, counts in stack.get("slices", {}).items():
            cells = [stack["name"], slice_name, *(str(counts[k]) for k in ("passed", "failed", "skipped"))]
            failed = ", ".join(f"`{failure.split('::')[-1]}`" for failure in counts.get("failures", []))
            timeouts = [f"`{failure.split('::')[-1]}` (timed out)" for failure in counts.get("timeouts", [])]
            failed = ", ".join(filter(None, [failed, *timeouts]))
            lines.append("| " + " | ".join([*cells, f"{counts['seconds']}s", failed]) + " |")
    return "\n".join(lines) + "\n"


def _left_out(stack: dict[str, Any]) -> str:
    if green(stack):
        return ""
    if not green(stack, ""):
        return "all"
    return ", ".join(name for name in FRAMEWORK_TESTS if not green(stack, name))


def tested_versions(results: dict[str, Any]) -> dict[str, Any]:
    """What the green stacks ran: the Python and torch range, each reported package's majors (a framework's
    from the stacks green for it)."""
    stacks = [stack for stack in results["stacks"] if green(stack, "")]
    if not stacks:
        raise SystemExit("no stack ran green: nothing to claim")

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", version)[:3])

    pythons = sorted({_major_minor(stack["python"]) for stack in stacks}, key=key)
    torches = sorted({stack["versions"]["torch"].split("+")[0] for stack in stacks}, key=key)
    majors = {
        name: sorted(
            {
                int(key(stack["versions"][name])[0])
                for stack in results["stacks"]
                if name in stack.get("versions", {}) and green(stack, name if name in FRAMEWORK_TESTS else "")
            }
        )
        for name in REPORTED
    }
    return {"python": [pythons[0], pythons[-1]], "torch": [torches[0], torches[-1]], "majors": majors}


def render_module(results: dict[str, Any]) -> str:
    tested = tested_versions(results)
    majors = "".join(f"    {name!r}: {tuple(found)!r},\n" for name, found in tested["majors"].items())
    return (
        '"""What the compatibility matrix ran green (docs/supported-versions.json): generated by\n'
        '``python .ci/compat.py``, do not edit."""\n\n'
        f"PYTHON = {tuple(tested['python'])!r}  # the oldest and newest CPython (major.minor)\n"
        f"TORCH = {tuple(tested['torch'])!r}  # the oldest and newest torch\n"
        "# each distribution's major versions\n"
        f"MAJORS: dict[str, tuple[int, ...]] = {{\n{majors}}}\n"
    )


def merge(saved: dict[str, Any], stacks: list[dict[str, Any]]) -> dict[str, Any]:
    """``saved`` with the stacks of this run put in place of theirs, in STACKS' order. A stack run again
    on the same versions with some of its slices keeps its other slices' results."""
    by_name = {stack["name"]: stack for stack in saved.get("stacks", [])}
    for stack in stacks:
        before = by_name.get(stack["name"])
        same = before and "slices" in stack and before.get("versions") == stack["versions"]
        if same and before["python"] == stack["python"] and before["pins"] == stack["pins"]:
            stack["slices"] = {**before["slices"], **stack["slices"]}
            _add_up(stack)
        by_name[stack["name"]] = stack
    order = [name for name in STACKS if name in by_name]
    return {"slices": SLICES, "stacks": [by_name[name] for name in order]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated: " + ", ".join(STACKS))
    parser.add_argument("--slices", help="comma-separated, instead of each stack's own: " + ", ".join(SLICES))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/torch-tfrecord-compat"))
    parser.add_argument("--keep", action="store_true", help="keep each venv and copy (several GB each)")
    parser.add_argument("--render", action="store_true", help="only regenerate from the saved results")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results (read, merged, written)")
    args = parser.parse_args(argv)
    saved = json.loads(args.results.read_text()) if args.results.exists() else {}
    if not args.render:
        stacks, slices = args.stacks.split(","), args.slices.split(",") if args.slices else []
        unknown = sorted(set(stacks) - set(STACKS)) + sorted(set(slices) - set(SLICES))
        if unknown:
            parser.error(f"unknown stack or slice: {', '.join(unknown)}")
        args.cache.mkdir(parents=True, exist_ok=True)
        for name in stacks:
            # some slices of a saved stack run again with its pins (its other slices' results are kept)
            before = {stack["name"]: stack["pins"] for stack in saved.get("stacks", [])}
            pins = before.get(name) if slices else None
            saved = merge(saved, [run_stack(name, slices or None, args.cache, args.keep, pins)])
            args.results.write_text(json.dumps(saved, indent=1) + "\n")
    markdown = render_markdown(saved)
    (args.cache / "compat.md").parent.mkdir(parents=True, exist_ok=True)
    (args.cache / "compat.md").write_text(markdown)
    TESTED_MODULE.write_text(render_module(saved))
    print(markdown)
    return 0 if all(green(stack) for stack in saved["stacks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
