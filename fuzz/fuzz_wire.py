"""Fuzzing of the viewer's wire walker, which describes records too large to read whole (atheris).

Each input is a record's payload. Then:

- the walker describes it or raises WireError exactly when protobuf refuses it as an Example;
- what it describes agrees with protobuf: the keys, each feature's kind and number of values,
  its first values (bytes values by their first 256 bytes and their size), and where each bytes
  value lies in the payload.

    python fuzz/fuzz_wire.py fuzz/corpus/wire -atheris_runs=100000
"""

from __future__ import annotations

from _harness import main


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a walker bug."""
    import struct

    from torch_tfrecord.codec.inspect import describe_record
    from torch_tfrecord.viewer.wire import WireError, describe_payload, find_value

    def read(offset: int, size: int) -> bytes:
        assert offset >= 0 and offset + size <= len(data), (offset, size)
        return data[offset : offset + size]

    truth = describe_record(data)
    try:
        found = describe_payload(read, len(data))
    except WireError:
        assert truth is None, "the walker refused an Example protobuf reads"
        return
    assert truth is not None, "the walker read what protobuf refuses"
    if found.partial:
        return
    assert list(found.features) == list(truth)
    for key, (kind, values) in truth.items():
        walked_kind, walked = found.features[key]
        assert found.counts[key] == len(values) and (walked_kind == kind or not values), key
        if kind == "bytes":
            assert [v[:256] for v in values[: len(walked)]] == walked
            for item, value in enumerate(values[:4]):
                at = find_value(read, len(data), key, item)
                assert at is not None and data[at[0] : at[0] + at[1]] == value
        elif kind == "float":
            shown = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values[: len(walked)]]
            assert shown == walked or any(v != v for v in walked)
        else:
            assert values[: len(walked)] == walked


def seeds() -> dict[str, bytes]:
    import torch_tfrecord as tt

    return {
        "empty": b"",
        "example": tt.encode_example({"a": [1, 2], "b": [b"xy", b""], "c": tt.FloatList([0.5, -1.0])}),
        "sequence": tt.encode_sequence_example({"a": [1]}, {"f": [[0.5], [1.5, 2.5]], "w": [[b"x"]]}),
        "large-values": tt.encode_example({"image": b"\x89PNG" + b"z" * 3000, "ids": list(range(300))}),
        "junk": b"\x0a\x05\x0a\x03\x0a\x01a",
    }


def load() -> None:
    import torch_tfrecord.codec.inspect
    import torch_tfrecord.viewer.wire  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
