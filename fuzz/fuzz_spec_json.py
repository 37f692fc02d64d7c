"""Fuzzing of spec.json, the spec saved beside a dataset's shards (atheris).

The first byte picks how the rest is read: as the whole file, or as one feature's entry inside
a valid file (``{"format": ..., "spec": {"x": <rest>}}``), so that the fuzzer reaches the spec
constructors. Then:

- decoding gives the dataset arguments, None (someone else's spec.json), or a SpecError
  naming the file;
- accepted specs are written and read back equal, and decode an Example without the feature
  (defaults filled in, within the stated bound) and with it, by both decoders alike.

    python fuzz/fuzz_spec_json.py fuzz/corpus/spec_json -atheris_runs=100000
"""

from __future__ import annotations

from _harness import Rejected, attempt, main


def check(data: bytes) -> None:
    """Raises AssertionError (or any non-library exception) on a spec.json bug."""
    import torch_tfrecord as tt
    from torch_tfrecord.codec.spec_file import decode_spec_json, encode_spec_json

    rest = data[1:].decode("utf-8", errors="replace")
    if data[:1] == b"w":
        rest = '{"format": "torch-tfrecord-spec", "version": 1, "spec": {"x": ' + rest + "}}"
    found = attempt(lambda: decode_spec_json(rest, source="fuzzed/spec.json"))
    if isinstance(found, Rejected):
        assert isinstance(found.error, tt.SpecError) and "fuzzed/spec.json" in str(found.error), found
        return
    if found is None:
        return
    again = decode_spec_json(encode_spec_json(**found), source="again")
    written = {"context_spec": {}, **found} if "sequence_spec" in found else found  # (written whole)
    assert again == written, (again, found)
    spec = found.get("spec")
    if spec is None:
        return
    from fuzz_spec import _decode_both

    _decode_both(tt.encode_example({}), spec)


def seeds() -> dict[str, bytes]:
    import torch

    import torch_tfrecord as tt
    from torch_tfrecord.codec.spec_file import encode_spec_json

    spec = {"a": tt.FixedLen((2,), torch.int64, default=[1, 2]), "b": tt.VarLen(bytes)}
    return {
        "file": b"f" + encode_spec_json(spec).encode(),
        "sequence": b"f" + encode_spec_json(context_spec={"a": "int"}, sequence_spec={"s": "float"}).encode(),
        "entry": b'w{"kind": "FixedLen", "shape": [3], "dtype": "float32", "default": 0.5}',
        "regression-huge-default": b'w{"kind": "FixedLen", "shape": [1000000000], "dtype": "float32", '
        b'"default": 0}',
        "other-format": b'f{"format": "someone-else"}',
        "nested": b"w" + b"[" * 5000,
    }


def load() -> None:
    import torch_tfrecord
    import torch_tfrecord.codec.native
    import torch_tfrecord.codec.spec_file  # noqa: F401


if __name__ == "__main__":
    main(check, seeds, load)
