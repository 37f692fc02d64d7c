"""Fuzzing of the label_map.pbtxt parser (atheris).

Each input is the text of a label map (UTF-8, invalid bytes replaced). Then:

- decoding gives a LabelMap (ids >= 1, each name once) or raises LabelMapError naming the source;
- an accepted map written back and read again is the same map.

    python fuzz/fuzz_label_map.py fuzz/corpus/label_map -atheris_runs=100000
"""

from __future__ import annotations

from _harness import Rejected, attempt, main


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a label map bug."""
    from torch_tfrecord.codec.label_map import LabelMap, LabelMapError

    text = data.decode("utf-8", errors="replace")
    labels = attempt(lambda: LabelMap.decode(text, source="fuzzed.pbtxt"))
    if isinstance(labels, Rejected):
        assert isinstance(labels.error, LabelMapError) and "fuzzed.pbtxt" in str(labels.error), labels
        return
    assert labels.names and all(isinstance(k, int) and k >= 1 for k in labels.names)
    assert len(set(labels.names.values())) == len(labels.names)
    assert LabelMap.decode(labels.encode()) == labels


def seeds() -> dict[str, bytes]:
    return {
        "two": b"item {\n  id: 1\n  name: 'cat'\n}\n"
        b"item {\n  id: 2\n  name: 'dog'\n  display_name: \"Dog\"\n}\n",
        "compact": b"# c\nitem{id:1;name:'a\\'b',}item{name:\"x\" id:3}",
        "missing-name": b"item { id: 1 }",
        "long-word": b"item { name: " + b"a" * 2000 + b" }",
        "unterminated": b"item { id: 1 name: 'abc",
    }


def load() -> None:
    import torch_tfrecord.codec.label_map  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
