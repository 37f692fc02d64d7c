"""The viewer's filter: clauses, words, lists matching on any value, and filters that do not parse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.codec.query import MAX_QUERY, QueryError, parse_query

RECORD = {
    "label": ("int64", [3]),
    "score": ("float", [0.25, 0.75]),
    "image/object/class/text": ("bytes", [b"Dog", b"cat"]),
    "id": ("bytes", [b"12"]),
}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("label == 3", True),
        ("label==3", True),
        ("label != 3", False),
        ("label >= 3 and label < 4", True),
        ("label == 4", False),
        ("score > 0.5", True),  # any value of a list
        ("score > 0.8", False),
        ("image/object/class/text == cat", True),
        ("image/object/class/text == 'Dog'", True),
        ("image/object/class/text ~ dog", True),  # contains, ignoring case
        ("image/object/class/text == dog", False),
        ("id == 12", True),  # a number compared with text as the text it reads as
        ("missing == 1", False),
        ("dog", True),  # a word in a text value
        ("class/text", True),  # a word in a key
        ("horse", False),
        ("label == 3 and horse", False),
    ],
)
def test_filters(text: str, matches: bool) -> None:
    assert parse_query(text).matches(RECORD) is matches


def test_a_record_that_is_not_an_example_never_matches() -> None:
    assert not parse_query("label == 3").matches(None)


@pytest.mark.parametrize("text", ["", "   ", "label ==", "== 3", "label >"])
def test_filters_that_do_not_parse_say_so(text: str) -> None:
    with pytest.raises(QueryError) as caught:
        parse_query(text)
    assert isinstance(caught.value, ValueError)


def test_a_long_filter_is_refused_before_it_is_parsed() -> None:
    """Issue 44: 30,000 spaces took 6.3 s in the old regular expressions (quadratic), stalling
    every other request. Filters are now read in one pass, and at most MAX_QUERY characters."""
    with pytest.raises(QueryError, match="30,000 characters"):
        parse_query(" " * 30_000)
    for text in [" " * (MAX_QUERY - 1) + "x", "a" + " " * (MAX_QUERY - 3) + "==", "and " * (MAX_QUERY // 4)]:
        try:
            parse_query(text)
        except QueryError:
            pass


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \t=!<>~'\"aAnNdD0.5xk/")), max_size=60))
def test_any_filter_parses_or_is_a_query_error(text: str) -> None:
    """Property: a filter is a Query (each clause a key, an operator and a value, the words not
    empty) or a QueryError, whatever the text."""
    try:
        query = parse_query(text)
    except QueryError:
        return
    assert query.clauses or query.words
    for clause in query.clauses:
        assert clause.key and clause.op in ("==", "!=", "<=", ">=", "<", ">", "~")
        assert clause.value != "" and not any(c.isspace() for c in clause.key)
    assert all(word == word.strip() and word for word in query.words)
