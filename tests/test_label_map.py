"""label_map.pbtxt as untrusted input (issue 44): parsed in one pass, within a stated length; a
malformed one beside the shards is named by the viewer, which goes on without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.codec.encode import encode_example
from torch_tfrecord.codec.label_map import MAX_LABEL_MAP, LabelMap, LabelMapError
from torch_tfrecord.records.writer import RecordWriter
from torch_tfrecord.viewer import Catalog


@pytest.mark.parametrize(
    "text",
    [
        "item { name: " + "a" * 20_000 + " }",  # issue 44: 2.5 s (quadratic) before
        "item { id: 1 name: '" + "x" * 1_000_000,  # a string that never ends
        "item {" * 100_000,
        "item { id: 1 name: 'a' " + "display_name: 'b' " * 50_000 + "}",
        "item { id: " + "9" * 5000 + " name: 'a' }",
        "item { id: 1 name: 'a' nested { x: 1 } }",
        "item { id: 1 name: 'a' }}",
    ],
)
def test_long_or_malformed_label_maps_are_read_in_one_pass(text: str) -> None:
    try:
        labels = LabelMap.decode(text, source="crafted.pbtxt")
    except LabelMapError as error:
        assert "crafted.pbtxt" in str(error)
    else:
        assert labels.names == {1: "a"}


def test_the_text_formats_own_forms_still_read() -> None:
    text = (
        '# classes\nitem {\n  id: 1;\n  name: \'c\\\'at\',\n  display_name: "Cat"\n}\nitem{id:2 name:"dog"}\n'
    )
    labels = LabelMap.decode(text)
    assert labels.names == {1: "c'at", 2: "dog"} and labels.display_names == {1: "Cat"}
    with pytest.raises(LabelMapError, match="line 7: an item needs both"):
        LabelMap.decode(text.replace('name:"dog"', ""))
    with pytest.raises(LabelMapError, match="characters, more than a label map holds"):
        LabelMap.decode(" " * (MAX_LABEL_MAP + 1))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(1, 10**6), st.text(max_size=30), min_size=1, max_size=8))
def test_encode_decode_round_trip(names: dict[int, str]) -> None:
    """Property: what encode writes, decode reads back (names of any text, quotes included)."""
    names = {label: name.replace("\n", " ").replace("\r", " ") for label, name in names.items()}
    if len(set(names.values())) < len(names):
        return
    labels = LabelMap(names)
    assert LabelMap.decode(labels.encode()) == labels


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["item", "{", "}", "id", "name", ":", "1", "2", "'a'", '"b"', ";", "#x\n", " ", "\n", "'", "\\"]
        ),
        max_size=30,
    )
)
def test_any_text_is_a_label_map_or_a_label_map_error(tokens: list[str]) -> None:
    """Property: whatever the text, decode returns a LabelMap or raises LabelMapError."""
    try:
        labels = LabelMap.decode(" ".join(tokens))
    except LabelMapError:
        return
    assert labels.names and all(label >= 1 for label in labels.names)


def test_a_malformed_label_map_beside_the_shards_does_not_stop_the_viewer(tmp_path: Path) -> None:
    """Issue 44: it stopped the viewer (its catalog could not be made)."""
    path = tmp_path / "data.tfrecord"
    with RecordWriter(str(path)) as writer:
        writer.write(encode_example({"label": [1]}))
    (tmp_path / "label_map.pbtxt").write_text("item { id: 1 name: 'cat' ")
    catalog = Catalog([str(tmp_path)])
    files = catalog.files()
    assert files["files"][0]["path"] == str(path) and catalog.class_names == {}
    assert any("label_map.pbtxt" in warning for warning in files["warnings"])
    (tmp_path / "label_map.pbtxt").write_bytes(b"\xff\xfe item")
    assert any("not UTF-8" in w for w in Catalog([str(tmp_path)]).files()["warnings"])
