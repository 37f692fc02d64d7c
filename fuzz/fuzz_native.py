"""Differential fuzzing of the native decoder, with the protobuf runtime as the oracle (atheris).

Each input is one byte choosing a spec, then a record. The record is decoded as an Example and
as a SequenceExample, bare and framed, by the compiled decoder and by protobuf: both must
accept it with the same values, or both reject it. Any difference, or a crash of the compiled
code, stops the run with the input saved by libFuzzer.

    pip install atheris
    python fuzz/fuzz_native.py fuzz/corpus/native -atheris_runs=200000      # a run
    python fuzz/fuzz_native.py --write-seeds fuzz/corpus/native              # the seed corpus

For coverage of the C code itself, build the extension with clang and
``-fsanitize=fuzzer-no-link,address`` and preload atheris's ``asan_with_fuzzer.so`` (see
fuzz/README.md); without that, libFuzzer is guided by the Python side only.
"""

from __future__ import annotations

import os
from typing import Any

from _harness import main

SPECS: list[dict[str, Any]] = []
SEQUENCE_SPECS: list[tuple[dict[str, Any], dict[str, Any]]] = []


def load() -> None:
    """Imports the library (after atheris, so that its imports can be instrumented) and the specs."""
    import torch

    from torch_tfrecord import FixedLen, FixedLenSequence, RawTensor, VarLen

    SPECS[:] = [
        {"x": VarLen(torch.int64), "y": VarLen(torch.float32), "z": VarLen(bytes)},
        {"x": FixedLen((2,), torch.int64), "y": FixedLen((), torch.float32, default=0.5)},
        {"x": FixedLen((), torch.int32, default=-1), "z": FixedLen((), str, default="")},
        {"y": FixedLenSequence((2,), torch.float32, allow_missing=True), "z": FixedLen((2,), bytes)},
        {"z": RawTensor(torch.int16, (-1,)), "x": VarLen(torch.bool)},
    ]
    SEQUENCE_SPECS[:] = [
        ({"x": VarLen(torch.int64)}, {"y": FixedLenSequence((2,), torch.float32, allow_missing=True)}),
        ({"z": FixedLen((), bytes, default=b"")}, {"x": VarLen(torch.int64), "z": VarLen(bytes)}),
    ]


def check(data: bytes) -> None:
    """Raises AssertionError when the decoders disagree on ``data``."""
    import numpy as np
    from test_native import (
        agree,
        decode_with,
        native_parses,
        outcome,
        protobuf_parses,
        reference_examples,
        same,
    )

    from torch_tfrecord.codec import decode as codec_decode
    from torch_tfrecord.codec import native
    from torch_tfrecord.records.framing import encode_record

    if not SPECS:
        load()
    if not data:
        return
    choice, record = data[0], data[1:]
    for sequence in (False, True):
        assert native_parses(record, sequence) == protobuf_parses(record, sequence), ("parse", sequence)
    from torch_tfrecord.codec.spec import normalize_spec

    spec = normalize_spec(SPECS[choice % len(SPECS)])
    assert spec is not None
    ours = outcome(lambda: native.decode_examples([record], spec, None))
    reference = outcome(lambda: reference_examples([record], spec))
    assert agree(ours, reference), ("example", ours, reference)
    frame = encode_record(record)
    framed = outcome(
        lambda: native.decode_framed(frame, np.array([0]), np.array([len(frame)]), spec, verify_crc=True)
    )
    assert same(framed, ours), ("framed", framed, ours)
    context, steps = SEQUENCE_SPECS[choice % len(SEQUENCE_SPECS)]
    ours = outcome(lambda: native.decode_sequences([record], context, steps, None))
    reference = outcome(
        lambda: decode_with("python", lambda: codec_decode._parse_sequences([record], context, steps, None))
    )
    assert agree(ours, reference), ("sequence", ours, reference)


def seeds() -> dict[str, bytes]:
    """A small corpus that reaches every spec kind and both message types."""
    import numpy as np

    import torch_tfrecord as tt

    examples = {
        "ints": {"x": [1, -2, 2**62], "y": tt.FloatList([0.5, -1.0]), "z": [b"ab", b""]},
        "scalars": {"x": 7, "y": tt.FloatList([2.5]), "z": [b"text"]},
        "raw": {"z": tt.BytesList([np.arange(4, dtype="<i2").tobytes()]), "x": [0, 1]},
        "empty": {},
    }
    out = {
        f"example-{name}": bytes([i]) + tt.encode_example(f) for i, (name, f) in enumerate(examples.items())
    }
    out["sequence"] = bytes([0]) + tt.encode_sequence_example(
        {"x": [3], "z": [b"q"]}, {"y": [[1.0, 2.0], [3.0, 4.0]], "x": [[1], [2, 3]], "z": [[b"a"], []]}
    )
    return out


def load_instrumented() -> None:
    os.environ["TORCH_TFRECORD_DECODER"] = "native"
    import torch_tfrecord.codec.native

    assert torch_tfrecord.codec.native._native is not None, "the extension did not load"
    load()


if __name__ == "__main__":
    main(check, seeds, load_instrumented)
