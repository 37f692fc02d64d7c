"""Fuzzing of the filter language (atheris): the text a web page sends the viewer as a filter.

Each input is a filter's text (UTF-8, invalid bytes replaced). Then:

- parsing gives a Query or raises QueryError naming a character inside the text (or, for a text
  over MAX_QUERY characters, the whole);
- a Query's two evaluators agree on six fixed records: the viewer's match on described records
  and a selection's column test (masks of decoded columns), unless the column test refuses the
  filter, before reading, for naming a feature no record has or comparing a number with text;
  a filter with words to search for is matched by the viewer alone, and must give a bool.

    python fuzz/fuzz_query.py fuzz/corpus/query -atheris_runs=100000
"""

from __future__ import annotations

from typing import Any

from _harness import Rejected, attempt, main

_RECORDS: list[bytes] = []


def _records() -> list[bytes]:
    if not _RECORDS:
        from torch_tfrecord.codec.encode import encode_example

        samples: list[dict[str, Any]] = [
            {"label": 3, "score": [0.25, 0.75], "text": [b"Dog", b"cat"], "id": [b"12"]},
            {"label": 7, "score": [2.5], "text": [b"cat or dog"]},
            {"label": 1, "text": [b""], "tags": [1, 2, 3]},
            {"label": -1, "score": [-1.0, 0.0]},
            {"id": [b"3"], "tags": [4]},
            {"label": 10, "score": [1e10], "text": [b"(in) [and]"], "id": [b"x"], "tags": [0]},
        ]
        _RECORDS.extend(encode_example(sample) for sample in samples)
    return _RECORDS


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a filter bug."""
    from torch_tfrecord.codec.inspect import describe_record
    from torch_tfrecord.codec.query import MAX_QUERY, QueryError, parse_query
    from torch_tfrecord.codec.schema import sample_dtypes
    from torch_tfrecord.data.select.conditions import ConditionTest
    from torch_tfrecord.errors import SelectionError

    text = data.decode("utf-8", errors="replace")
    query = attempt(lambda: parse_query(text))
    if isinstance(query, Rejected):
        error = query.error
        assert isinstance(error, QueryError), query
        assert (error.position is None) == (len(text) > MAX_QUERY), query
        assert error.position is None or 0 <= error.position <= len(text), query
        return
    records = _records()
    viewer = [query.matches(describe_record(record)) for record in records]
    assert all(isinstance(found, bool) for found in viewer), viewer
    if query.words:
        return
    test = attempt(lambda: ConditionTest(query, sample_dtypes(records)))
    if isinstance(test, Rejected):
        assert isinstance(test.error, SelectionError), test
        assert "which no record read holds" in str(test.error) or "never equal" in str(test.error), test
        return
    assert test(records).tolist() == viewer, (text, viewer)


def seeds() -> dict[str, bytes]:
    return {
        "clause": b"label == 3",
        "or": b"label == 1 or label == 7",
        "precedence": b"not label < 2 and score > 0.5 OR text ~ 'cat or dog'",
        "parentheses": b"(label in [1, 3, 10] or tags == 4) and not (score >= 1e10)",
        "words": b"dog and not horse",
        "in-text": b"text in ['', Dog, \"(in) [and]\"] or id in [3, x]",
        "deep": b"(" * 40 + b"label == 3" + b")" * 40,
        "unclosed": b"text ~ 'dog",
        "long": b"label == 3 or " * 80,
    }


def load() -> None:
    import torch_tfrecord.codec.query
    import torch_tfrecord.data.select.conditions  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
