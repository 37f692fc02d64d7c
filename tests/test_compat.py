"""The compatibility matrix (.ci/compat.py): its pieces, and that what the package claims is what the
saved run (docs/supported-versions.json) shows: every declared floor ran green, and the versions the
code knows (support/tested_versions.py, the frameworks' known majors) were generated from it."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tomllib

from torch_tfrecord.data.frameworks import detect as frameworks
from torch_tfrecord.support import tested_versions

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compat() -> Any:
    """.ci/compat.py's names (a script in a folder that is no package)."""
    return SimpleNamespace(**runpy.run_path(str(ROOT / ".ci" / "compat.py")))


@pytest.fixture(scope="module")
def results(compat: Any) -> dict[str, Any]:
    return dict(json.loads(compat.RESULTS.read_text()))


def _bounds() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    extras = [requirement for extra in project["optional-dependencies"].values() for requirement in extra]
    for requirement in [*project["dependencies"], *extras]:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)", requirement)
        if match:
            found.setdefault(match[1].lower(), match[2])
    return found


def _release(version: str) -> tuple[int, ...]:
    parts = [int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def test_the_floor_stack_pins_each_declared_lower_bound(compat: Any) -> None:
    pins = compat.floor_pins()
    bounds = _bounds()
    assert len(pins) == len(compat.FLOORED)
    for pin in pins:
        name, version = re.sub(r"\[.*\]", "", pin).split("==")
        assert bounds[name] == version


def test_every_declared_floor_ran_green(compat: Any, results: dict[str, Any]) -> None:
    floor = next(stack for stack in results["stacks"] if stack["name"] == "floor")
    assert compat.green(floor, ""), floor  # every test but those of a framework
    assert set(compat.floor_pins()) <= set(floor["pins"]), "floors changed: run .ci/compat.py --stacks floor"
    bounds = _bounds()
    for name in compat.REPORTED:  # the lowest release a stack ran green (for a framework: its tests too)
        claim = name if name in compat.FRAMEWORK_TESTS else ""
        ran = [
            _release(stack["versions"][name])
            for stack in results["stacks"]
            if name in stack.get("versions", {}) and compat.green(stack, claim)
        ]
        assert name not in bounds or min(ran) == _release(bounds[name]), (name, ran, bounds.get(name))
    assert _release(floor["python"])[:2] == _release(tested_versions.PYTHON[0])[:2]


def test_the_known_versions_come_from_the_saved_run(compat: Any, results: dict[str, Any]) -> None:
    assert compat.TESTED_MODULE.read_text() == compat.render_module(results), "run .ci/compat.py --render"
    for module, (distribution, majors) in frameworks.KNOWN_MAJORS.items():
        name = "lightning" if distribution == "pytorch-lightning" else distribution
        assert majors == tested_versions.MAJORS[name], module


def test_every_claimed_python_ran(results: dict[str, Any], compat: Any) -> None:
    ran = {".".join(stack["python"].split(".")[:2]) for stack in results["stacks"] if compat.green(stack, "")}
    oldest, newest = (_release(v)[:2] for v in tested_versions.PYTHON)
    claimed = {f"3.{minor}" for minor in range(oldest[1], newest[1] + 1)}
    assert claimed <= ran


def test_parse_junit(compat: Any, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10">'
        "</testsuite></testsuites>"
    )
    assert compat.parse_junit(junit) == dict(passed=4, failed=3, skipped=3, failures=[], timeouts=[])
    junit.write_text(
        '<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="2">'
        '<testcase classname="tests.test_x" name="test_a[accelerate]"><failure message="no"/></testcase>'
        '<testcase classname="tests.test_x" name="test_b"/>'
        '<testcase classname="tests.test_x" name="test_c"><error message="Failed: the process group did not '
        'finish within 240 s (a hang)"/></testcase></testsuite></testsuites>'
    )
    assert compat.parse_junit(junit)["failures"] == ["tests.test_x::test_a[accelerate]"]
    assert compat.parse_junit(junit)["timeouts"] == ["tests.test_x::test_c"]
    assert compat.parse_junit(tmp_path / "none.xml")["failed"] == 1


def test_a_frameworks_failure_leaves_out_only_its_claim(compat: Any) -> None:
    stack = _stack("old", "3.10.13", 1, torch="2.2.0", accelerate="1.0.0")
    stack["slices"]["frameworks"]["failures"] = ["tests.test_frameworks::test_resume[accelerate]"]
    assert not compat.green(stack) and compat.green(stack, "") and compat.green(stack, "lightning")
    assert not compat.green(stack, "accelerate")
    stack["slices"]["frameworks"]["failures"] = []
    stack["slices"]["frameworks"]["timeouts"] = ["tests.test_distributed::test_x"]  # proves nothing
    assert compat.green(stack, "") and compat.green(stack, "accelerate") and not compat.green(stack)
    stack["slices"]["frameworks"]["failures"] = ["tests.test_frameworks::test_resume[accelerate]"]
    stack["slices"]["frameworks"]["failures"].append("tests.test_codec::test_x")
    assert not compat.green(stack, "") and not compat.green(stack, "lightning")


def _stack(name: str, python: str, failed: int, **versions: str) -> dict[str, Any]:
    counts = {"passed": 5, "failed": failed, "skipped": 1, "seconds": 61}
    failures = ["tests.test_frameworks::test_a[accelerate]"] * failed if name == "cut" else []
    slices = {"frameworks": {**counts, **({"failures": failures} if failures else {})}}
    return {"name": name, "python": python, "versions": versions, "slices": slices, **counts}


def test_render(compat: Any) -> None:
    results = {
        "slices": {"codec": ["tests/test_codec.py"]},
        "stacks": [
            _stack("old", "3.10.13", 0, torch="2.1.0+cu121", accelerate="1.0.0"),
            _stack("new", "3.13.0", 0, torch="2.15.0", accelerate="2.0.0"),
            _stack("cut", "3.11.7", 1, torch="2.6.0", accelerate="3.0.0"),
            _stack("broken", "3.14.0", 2, torch="3.0.0", accelerate="3.0.0"),
            {"name": "bad", "python": "3.12", "pins": [], "install_failed": True},
        ],
    }
    markdown = compat.render_markdown(results)
    assert "| old | 3.10.13 | 2.1.0+cu121 | - | - | 1.0.0 |" in markdown
    assert "| 5 | 0 | 1 | 1m01s |" in markdown
    assert "| bad | 3.12 |" in markdown and "install failed" in markdown
    assert "| broken | frameworks | 5 | 2 | 1 | 61s |" in markdown
    assert "| 5 | 1 | 1 | 1m01s | accelerate |" in markdown  # "cut": only its accelerate tests failed
    namespace: dict[str, Any] = {}
    exec(compat.render_module(results), namespace)  # the generated module is valid Python
    assert namespace["PYTHON"] == ("3.10", "3.13")  # the broken stack claims nothing
    assert namespace["TORCH"] == ("2.1.0", "2.15.0")
    assert namespace["MAJORS"]["accelerate"] == (1, 2)  # not 3: its tests failed in "cut"
    assert namespace["MAJORS"]["numpy"] == ()


def test_a_rerun_of_some_slices_keeps_the_others(compat: Any) -> None:
    def stack(slices: dict[str, int], **versions: str) -> dict[str, Any]:
        counts = {name: {"passed": n, "failed": 0, "skipped": 0, "seconds": 1} for name, n in slices.items()}
        pins = ["torch==2.1"]
        return {"name": "floor", "python": "3.10.13", "pins": pins, "versions": versions, "slices": counts}

    saved = compat.merge({}, [stack({"codec": 5, "loader": 7}, torch="2.1.0")])
    again = compat.merge(saved, [stack({"codec": 6}, torch="2.1.0")])
    assert again["stacks"][0]["slices"]["loader"]["passed"] == 7
    assert again["stacks"][0]["passed"] == 13
    other = compat.merge(saved, [stack({"codec": 6}, torch="2.1.2")])  # other versions: a new run
    assert list(other["stacks"][0]["slices"]) == ["codec"]
