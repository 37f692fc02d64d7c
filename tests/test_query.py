"""The filter language: clauses, words, lists matching on any value, ``and`` / ``or`` / ``not`` /
parentheses / ``in``, and filters that do not parse (each error naming its character)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.codec.query import (
    MAX_DEPTH,
    MAX_QUERY,
    AllOf,
    AnyOf,
    Clause,
    Not,
    QueryError,
    Search,
    parse_query,
)

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
        ("label == 1 or label == 3", True),
        ("label == 1 or label == 7", False),
        ("horse or dog", True),
        ("label in [1, 3]", True),
        ("label in [1, 2]", False),
        ("image/object/class/text in [horse, cat]", True),
        ("image/object/class/text in ['dog', horse]", False),  # equality, with case
        ("not label == 3", False),
        ("not missing == 1", True),  # a record without the feature: the comparison is false
        ("missing != 1", False),  # ... also this one, so `not x == 1` and `x != 1` differ there
        ("not horse", True),
        ("NOT label == 4 AND Label == 3", False),  # keywords in any case; keys keep theirs
        ("NOT label == 4 AnD label == 3", True),
        ("(label == 1 or label == 3) and score > 0.5", True),
        ("label == 1 or label == 3 and score > 0.8", False),  # and binds tighter than or
        ("(label == 3 or horse) and not (score < 0 or id == 13)", True),
        ("image/object/class/text ~ 'dog or cat'", False),  # a quoted keyword is text
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


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        (
            "a == 1 or b == 2 and not c == 3",
            AnyOf((Clause("a", "==", 1), AllOf((Clause("b", "==", 2), Not(Clause("c", "==", 3)))))),
        ),
        (
            "not a == 1 and b == 2",
            AllOf((Not(Clause("a", "==", 1)), Clause("b", "==", 2))),
        ),
        (
            "(a == 1 or b == 2) and c ~ x",
            AllOf((AnyOf((Clause("a", "==", 1), Clause("b", "==", 2))), Clause("c", "~", "x"))),
        ),
        ("not (a == 1)", Not(Clause("a", "==", 1))),
        ("not not a == 1", Not(Not(Clause("a", "==", 1)))),
        (
            "a in [1, 'x, y', big dog]",
            AnyOf((Clause("a", "==", 1), Clause("a", "==", "x, y"), Clause("a", "==", "big dog"))),
        ),
        ("a IN [2]", Clause("a", "==", 2)),
        ("a or b and c", AnyOf((Search("a"), AllOf((Search("b"), Search("c")))))),
        # Quoted: the text as written, keywords and brackets included.
        ('text ~ "cat or dog"', Clause("text", "~", "cat or dog")),
        ("text == 'not (in) [and]'", Clause("text", "==", "not (in) [and]")),
        ("'cat or dog'", Search("cat or dog")),
        ("text == '3'", Clause("text", "==", "3")),
        ("text == ''", Clause("text", "==", "")),
        # Unquoted words not ambiguous with the keywords keep their old meaning: one value, spaces kept.
        ("text ~ big  dog", Clause("text", "~", "big  dog")),
        ("text ~ made in china", Clause("text", "~", "made in china")),
        ("text ~ do not enter", Clause("text", "~", "do not enter")),
        ("dog not cat", Search("dog not cat")),
        ("label==-1.5", Clause("label", "==", -1.5)),
        ("hello! world, again", Search("hello! world, again")),
        ("don't", Search("don't")),
        # ... and what the new keywords now split.
        ("text ~ cat or dog", AnyOf((Clause("text", "~", "cat"), Search("dog")))),
        ("not found", Not(Search("found"))),
    ],
)
def test_the_tree(text: str, tree: object) -> None:
    assert parse_query(text).tree == tree


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("label ==", 8, "expected a value .*, found the end of the filter"),
        ("== 3", 0, "expected a clause"),
        ("label == 3 or", 13, "expected a clause .*, found the end"),
        ("label == 3 or or x", 14, "found the word 'or'"),
        ("text ~ and", 7, "expected a value .*, found the word 'and' \\(quote it"),
        ("(a == 1", 7, r"expected the \) that closes the \( at character 0"),
        ("a == 1)", 6, r"expected a \( before this \)"),
        ("(a == 1) (b == 2)", 9, "expected and, or, or the end of the filter"),
        ("big dog == 3", 8, "a key is one word"),
        ("'a key' == 3", 8, "a key is not quoted"),
        ("a = 1", 2, "write == to compare"),
        ("text == 'dog", 8, "the quote ' here does not close"),
        ("a in [1, 2", 10, ", or \\] after a listed value"),
        ("a in [1,, 2]", 8, "expected a value .*, found ','"),
        ("a in []", 6, "expected a value"),
        ("not", 3, "expected a clause"),
        ("''", 0, "expected words to search for"),
        ("   ", 0, "the filter is empty"),
    ],
)
def test_an_error_names_its_character_and_what_was_expected(text: str, position: int, expected: str) -> None:
    with pytest.raises(QueryError, match=expected) as caught:
        parse_query(text)
    assert caught.value.position == position
    if text.strip():
        assert f"at character {position}:" in str(caught.value)


def test_nesting_is_capped() -> None:
    """A hostile ``((((...`` or ``not not not ...`` is refused where it passes MAX_DEPTH, before
    any deep recursion, at any length up to MAX_QUERY."""
    deepest = "(" * MAX_DEPTH + "a == 1" + ")" * MAX_DEPTH
    assert parse_query(deepest).tree == Clause("a", "==", 1)
    with pytest.raises(QueryError, match=f"nest more than {MAX_DEPTH} deep") as caught:
        parse_query("(" + deepest + ")")
    assert caught.value.position == MAX_DEPTH
    with pytest.raises(QueryError, match="nest more than") as caught:
        parse_query("not " * (MAX_DEPTH + 1) + "a")
    assert caught.value.position == 4 * MAX_DEPTH
    for text in ["(" * MAX_QUERY, "not (" * (MAX_QUERY // 5), "[" * MAX_QUERY, "a in [" * (MAX_QUERY // 6)]:
        with pytest.raises(QueryError):
            parse_query(text)
    assert parse_query("not (" * (MAX_DEPTH // 2) + "x" + ")" * (MAX_DEPTH // 2)).words == ("x",)


def test_the_length_cap_counts_characters() -> None:
    longest = "label == 3 or " * ((MAX_QUERY - 10) // 14) + "label == 3"
    assert len(longest) <= MAX_QUERY and len(parse_query(longest).clauses) == (MAX_QUERY - 10) // 14 + 1
    with pytest.raises(QueryError, match=f"{MAX_QUERY + 1:,} characters") as caught:
        parse_query("x" * (MAX_QUERY + 1))
    assert caught.value.position is None


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" =!<>~'\"()[],aAnNdDoOrRtTiI0.5xk/-")), max_size=80))
def test_any_text_is_a_query_or_a_query_error(text: str) -> None:
    """Property: whatever the text (brackets and keywords included), parsing ends in a Query whose
    parts are all sound, or in a QueryError that points inside the text; nothing else escapes."""
    try:
        query = parse_query(text)
    except QueryError as error:
        assert error.position is not None and 0 <= error.position <= len(text)
        return
    for clause in query.clauses:
        assert clause.key and clause.op in ("==", "!=", "<=", ">=", "<", ">", "~")
        assert not any(c in clause.key for c in " ()[]=<>~") and clause.key[0] not in "'\""
    assert all(word == word.strip() and word for word in query.words)
