"""``tt.select`` and ``tfrecord-index select``: one scan of every record, the viewer's filter (the
same records as the viewer's filter page finds) or a Python predicate (in processes too), only the
tested features decoded; a filter that names no feature, compares a number with text or keeps
nothing is refused before anything is written."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_tfrecord as tt
from torch_tfrecord.codec.inspect import describe_record
from torch_tfrecord.codec.query import parse_query
from torch_tfrecord.codec.schema import sample_dtypes
from torch_tfrecord.data.select import conditions
from torch_tfrecord.records.reader import read_records

WORDS = ["dog", "Dog house", "cat", "3", "10", "", "zebra"]
SIZES = (30, 0, 45, 25)  # 100 records


def _record(number: int) -> dict[str, Any]:
    generator = np.random.default_rng(number)
    record: dict[str, Any] = {"label": int(generator.integers(0, 10)), "id": number}
    if number % 4:  # some records lack these
        record["score"] = [float(v) for v in generator.choice([0.0, 0.25, 0.5, 2.5, -1.0], 2)]
        record["text"] = [WORDS[int(i)].encode() for i in generator.integers(0, len(WORDS), 2)]
    if number % 3 == 0:
        record["tags"] = [int(v) for v in generator.integers(0, 5, int(generator.integers(0, 4)))]
    return record


def write_shards(folder: Path, sizes: tuple[int, ...] = SIZES) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    number = 0
    for shard, size in enumerate(sizes):
        with tt.ExampleWriter(folder / f"part-{shard}.tfrecord") as writer:
            for _ in range(size):
                writer.write(_record(number))
                number += 1
    return str(folder / "part-*.tfrecord")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("scan"))


def _viewer_matches(shards: str, text: str) -> list[int]:
    """The records the viewer's filter page matches, by record id."""
    query = parse_query(text)
    found, number = [], 0
    for path in sorted(Path(shards).parent.glob(Path(shards).name)):
        for payload in read_records(str(path)):
            if query.matches(describe_record(payload)):
                found.append(number)
            number += 1
    return found


def _selected(shards: str, text: str) -> list[int] | str:
    try:
        return tt.select(shards, where=text).record_ids().tolist()
    except tt.SelectionError as error:
        return str(error)


VALUES = st.one_of(
    st.integers(-2, 11).map(str),
    st.sampled_from(["0.25", "2.5", "-1", "1e1"]),
    st.sampled_from(["dog", "'dog'", '"Dog house"', "'3'", "''", "cat", "'x'", "house"]),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["label", "id", "score", "text", "tags", "missing"]),
            st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "~"]),
            VALUES,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_the_filter_selects_what_the_viewer_finds(shards: str, clauses: list[tuple[str, str, str]]) -> None:
    text = " and ".join(f"{key} {op} {value}" for key, op, value in clauses)
    viewer = _viewer_matches(shards, text)
    selected = _selected(shards, text)
    if isinstance(selected, str):  # refused: then the viewer finds nothing either
        assert viewer == [], (text, selected)
        assert any(
            words in selected for words in ("no record passes", "which no record read holds", "never equal")
        ), selected
    else:
        assert selected == viewer, text


def _has(number: int, key: str) -> bool:
    return key in _record(number)


def _texts(number: int) -> list[str]:
    return [value.decode() for value in _record(number).get("text", [])]


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ("label == 1 or label == 7", lambda n: _record(n)["label"] in (1, 7)),
        ("label in [1, 7]", lambda n: _record(n)["label"] in (1, 7)),
        ("LABEL == 1 Or label == 7", lambda n: False),  # keys keep their case: no feature LABEL
        ("not label in [1, 7] and id < 50", lambda n: _record(n)["label"] not in (1, 7) and n < 50),
        # A record without `text` fails the comparison, so `not` passes it.
        ("not text ~ dog", lambda n: not any("dog" in t.lower() for t in _texts(n))),
        ("text ~ dog", lambda n: any("dog" in t.lower() for t in _texts(n))),
        (
            "text == 'Dog house' or (tags == 4 and not label >= 5)",
            lambda n: (
                "Dog house" in _texts(n) or (4 in _record(n).get("tags", []) and _record(n)["label"] < 5)
            ),
        ),
    ],
)
def test_or_in_and_not_select_what_a_python_predicate_keeps(shards: str, where: str, keep: Any) -> None:
    expected = [n for n in range(100) if keep(n)]
    if not expected:
        with pytest.raises(tt.SelectionError, match="names 'LABEL'"):
            tt.select(shards, where=where)
        return
    assert 0 < len(expected) < 100
    assert tt.select(shards, where=where).record_ids().tolist() == expected == _viewer_matches(shards, where)


def test_a_clause_on_no_feature_is_refused_wherever_it_stands(
    shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any record is decoded, even where another branch of an ``or`` could pass."""
    decoded: list[Any] = []
    monkeypatch.setattr(conditions, "decode_batch", lambda *args, **kwargs: decoded.append(args))
    for where in ("label == 1 or lable == 7", "not (label == 1 and lable in [3, 4])"):
        with pytest.raises(tt.SelectionError, match="names 'lable', which no record read holds"):
            tt.select(shards, where=where)
    with pytest.raises(tt.SelectionError, match="never equal"):
        tt.select(shards, where="text ~ dog or not label == 'x'")
    assert decoded == []


KEYS = st.sampled_from(["label", "id", "score", "text", "tags"])
OPS = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "~"])
FILTERS = st.recursive(
    st.one_of(
        st.builds(lambda key, op, value: f"{key} {op} {value}", KEYS, OPS, VALUES),
        st.builds(
            lambda key, values: f"{key} in [{', '.join(values)}]",
            KEYS,
            st.lists(VALUES, min_size=1, max_size=3),
        ),
    ),
    lambda inner: st.one_of(
        st.builds(lambda a: f"not {a}", inner),
        st.builds(lambda a: f"({a})", inner),
        st.builds(lambda a, b: f"{a} and {b}", inner, inner),
        st.builds(lambda a, b: f"({a} OR {b})", inner, inner),
        st.builds(lambda a, b: f"{a} or {b}", inner, inner),
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def payloads(shards: str) -> list[bytes]:
    return [
        payload
        for path in sorted(Path(shards).parent.glob(Path(shards).name))
        for payload in read_records(str(path))
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(FILTERS)
def test_the_column_test_agrees_with_the_viewer_on_any_filter(payloads: list[bytes], text: str) -> None:
    """Property: for ``and`` / ``or`` / ``not`` / parentheses / ``in`` over clauses, the masks of
    decoded columns (a selection's scan) pass exactly the records the viewer's match passes, or
    the filter is refused for comparing a number feature with text."""
    query = parse_query(text)
    try:
        test = conditions.ConditionTest(query, sample_dtypes(payloads))
    except tt.SelectionError as error:
        assert "never equal" in str(error), (text, error)
        return
    columns = test(payloads).tolist()
    viewer = [query.matches(describe_record(payload)) for payload in payloads]
    assert columns == viewer, text
    for size in (1, 7):  # a batch at a time gives the same
        batches = [test(payloads[i : i + size]) for i in range(0, len(payloads), size)]
        assert np.concatenate(batches).tolist() == viewer


def test_plain_words_search_as_the_viewer_does(shards: str) -> None:
    for text in ("zebra", "house and label >= 5", "tags", "zebra or label == 3", "not house and score > 1"):
        assert _selected(shards, text) == _viewer_matches(shards, text) != []


def test_only_the_tested_features_are_decoded(shards: str, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[set[str]] = []
    original = conditions.decode_batch

    def watched(records: Any, spec: Any, **kwargs: Any) -> Any:
        decoded.append(set(spec))
        return original(records, spec, **kwargs)

    monkeypatch.setattr(conditions, "decode_batch", watched)
    tt.select(shards, where="label >= 3 and text ~ o")
    assert decoded and all(keys == {"label", "text"} for keys in decoded)


def test_refused_before_anything_is_written(shards: str, tmp_path: Path) -> None:
    out = tmp_path / "sel.ttsel"
    cases = {
        "lable == 3": r"`lable == 3` names 'lable', which no record read holds \(features: id, label, sc",
        "label == 'x'": r"'label' holds int64 values, which never equal or order with the text 'x'",
        "score >= dog": r"'score' holds float values",
        "label == 99": r"no record passes `label == 99` \(of 100 records in 4 shards\)",
        "label == ": "cannot read the filter",
    }
    for text, match in cases.items():
        with pytest.raises((tt.SelectionError, ValueError), match=match):
            tt.select(shards, where=text, out=out)
        assert not out.exists() and not list(tmp_path.iterdir())
    with pytest.raises(tt.SelectionError, match="there is no folder"):
        tt.select(shards, where="label == 3", out=tmp_path / "nowhere" / "sel.ttsel")
    with pytest.raises(ValueError, match="give where= .* or predicate="):
        tt.select(shards)


def test_a_feature_few_records_set_is_typed_by_spec(tmp_path: Path) -> None:
    folder = tmp_path / "rare"
    folder.mkdir()
    with tt.ExampleWriter(folder / "a.tfrecord") as writer:
        for number in range(1200):
            writer.write({"id": number, **({"rare": 7} if number == 1100 else {})})
    pattern = str(folder / "*.tfrecord")
    with pytest.raises(tt.SelectionError, match="give its type"):
        tt.select(pattern, where="rare == 7")
    assert tt.select(pattern, where="rare == 7", spec={"rare": "int"}).record_ids().tolist() == [1100]


def keep_even_labels(sample: dict[str, Any]) -> bool:  # module level: picklable for jobs=
    return int(sample["label"]) % 2 == 0


def test_a_predicate_in_processes_selects_what_it_selects_here(shards: str, tmp_path: Path) -> None:
    spec = {"label": tt.FixedLen((), torch.int64)}
    here = tt.select(shards, predicate=keep_even_labels, spec=spec)
    there = tt.select(shards, predicate=keep_even_labels, spec=spec, jobs=2, out=tmp_path / "even.ttsel")
    assert here == there == tt.Selection.read(tmp_path / "even.ttsel")
    assert here.record_ids().tolist() == [i for i in range(100) if _record(i)["label"] % 2 == 0]
    with pytest.raises(ValueError, match="module-level function"):
        tt.select(shards, predicate=lambda s: True, jobs=2)
    ds = tt.TFRecordDataset(shards, spec=spec, select=tmp_path / "even.ttsel")
    assert sorted(int(s["label"]) % 2 for s in ds) == [0] * len(here)


def test_a_manifest_a_records_files_part_and_compressed_shards(tmp_path: Path) -> None:
    with tt.ShardedExampleWriter(tmp_path / "m" / "train", max_records=40) as writer:
        for number in range(100):
            writer.write(_record(number))
    manifest = next((tmp_path / "m").glob("*.manifest.json"))
    by_manifest = tt.select(str(manifest), where="label < 5")
    by_glob = tt.select(str(tmp_path / "m" / "*.tfrecord"), where="label < 5")
    assert by_manifest == by_glob
    assert tt.TFRecordDataset(str(manifest), select=by_glob).num_records == len(by_glob)
    # Part of the files (as tt.from_tfds's split slices make them): byte ranges of the shards.
    files = tt.TFRecordDataset(str(manifest)).files.keep_ranges([(0, 10, 40), (2, 0, 5)])
    part = tt.select(files, where="label < 5")
    expected = [i for i, n in enumerate([*range(10, 40), *range(80, 85)]) if _record(n)["label"] < 5]
    assert part.record_ids().tolist() == expected
    dataset = tt.TFRecordDataset(files, spec={"id": "int"}, select=part, shuffle=False)
    assert [int(s["id"][0]) for s in dataset] == [
        n for n in [*range(10, 40), *range(80, 85)] if _record(n)["label"] < 5
    ]
    # GZIP shards: scanned inflated, read back through their seek points.
    plain = tmp_path / "m" / "train-00000-of-00003.tfrecord"
    zipped = tmp_path / "z"
    zipped.mkdir()
    with open(plain, "rb") as source, gzip.open(zipped / "a.tfrecord.gz", "wb") as target:
        shutil.copyfileobj(source, target)
    chosen = tt.select(str(zipped), where="label >= 5")
    dataset = tt.TFRecordDataset(str(zipped), spec={"label": "int"}, select=chosen)
    assert sorted(int(s["label"][0]) for s in dataset) == sorted(
        _record(n)["label"] for n in range(40) if _record(n)["label"] >= 5
    )


def test_the_command_line(shards: str, tmp_path: Path) -> None:
    out = tmp_path / "l3.ttsel"
    command = [
        sys.executable,
        "-m",
        "index_tools",
        "select",
        shards,
        "--where",
        "label == 3",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = [i for i in range(100) if _record(i)["label"] == 3]
    assert f"kept {len(expected)} of 100 records" in done.stdout
    assert tt.Selection.read(out).record_ids().tolist() == expected
    bad = subprocess.run(
        [*command[:5], "--where", "label == 'x'", "--out", str(tmp_path / "x.ttsel")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "tfrecord-index: error:" in bad.stderr and "never equal" in bad.stderr
    assert not (tmp_path / "x.ttsel").exists()
