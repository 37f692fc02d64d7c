"""What users import does not move when the code inside does: ``tt.*``, the module paths they
may have written before the package had layers, the command lines' entry points, and states
saved by an earlier version."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import torch_tfrecord as tt

DATA = Path(__file__).parent / "data"

PUBLIC = [
    "PADDING_KEY", "RECORD_ID_KEY", "BytesList", "CompressedIndex", "CompressedIndexError",
    "CorruptRecordError", "DamagedRegion", "EpochPlan", "ExampleDecodeError", "ExampleWriter",
    "FeatureError", "FeatureShapeError", "FeatureTypeError", "FixedLen", "FixedLenSequence",
    "FloatList", "Image", "IndexFormatError", "IndexedTFRecordDataset", "Int64List",
    "MissingFeatureError", "MixedDataset", "Ragged", "RawTensor", "ReadStats", "RecordWriter",
    "RemoteIOError", "RowList", "ShardedWriter", "SourceNotFoundError", "SpecError", "StaleIndexError",
    "TFRecordDataset", "TFRecordError", "TruncatedRecordError", "VarLen", "build_compressed_index",
    "build_index", "check_index", "collate", "count_records", "decode_batch", "decode_example",
    "decode_sequence_batch", "decode_sequence_example", "default_index_path", "detection_spec",
    "encode_example", "encode_record", "encode_sequence_example", "from_parquet", "from_tfds", "infer_spec",
    "load_compressed_index", "load_index", "masked_crc32c", "mix", "read_records",
    "save_compressed_index", "save_index", "segmentation_spec", "split_batch", "to_hf", "to_parquet",
    "write_dataset",
]  # fmt: skip

# Module paths of the flat package, each with names users took from it.
OLD_PATHS = {
    "torch_tfrecord.dataset": ["TFRecordDataset", "IndexedTFRecordDataset"],
    "torch_tfrecord.spec": ["FixedLen", "FixedLenSequence", "VarLen", "Image", "RawTensor"],
    "torch_tfrecord.reader": ["read_records", "ReadStats", "DamagedRegion"],
    "torch_tfrecord.writer": ["RecordWriter", "ExampleWriter", "ShardedWriter"],
    "torch_tfrecord.index": ["build_index", "check_index", "load_index", "save_index", "default_index_path"],
    "torch_tfrecord.tfds": ["from_tfds"],
    "torch_tfrecord.codec": ["decode_batch", "decode_example", "decode_sequence_batch"],
}


def test_the_public_names_are_pinned() -> None:
    assert tt.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(tt, name) is not None


@pytest.mark.parametrize("module", sorted(OLD_PATHS))
def test_the_old_module_paths_still_import(module: str) -> None:
    imported = importlib.import_module(module)
    for name in OLD_PATHS[module]:
        assert getattr(imported, name) is getattr(tt, name), f"{module}.{name}"


def test_the_modules_the_documentation_reaches_as_attributes() -> None:
    assert tt.native.decoder() in ("native", "python")
    assert tt.remote.RetryPolicy is not None and tt.order.EpochPlan is tt.EpochPlan
    import torch_tfrecord.vision

    assert torch_tfrecord.vision.to_detection_target is not None


def test_the_command_lines_entry_points() -> None:
    from index_tools.cli import main as index_main
    from torch_tfrecord.cli import build_parser, main

    assert callable(main) and callable(index_main) and build_parser().prog == "torch-tfrecord"
    for module in ("torch_tfrecord", "index_tools"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
        assert result.returncode == 0 and "usage:" in result.stdout


def test_a_state_saved_before_the_layers_resumes_the_same_batches(tmp_path: Path) -> None:
    """tests/data/states: a state taken mid-epoch by 0.1.0 (make_state_golden.py), and what the
    rest of the epoch gave then."""
    golden = json.loads((DATA / "states" / "global-epoch1-rank0-of-2.json").read_text())
    for shard in range(2):
        with tt.ExampleWriter(tmp_path / f"train-{shard}.tfrecord") as writer:
            for i in range(50):
                writer.write({"id": shard * 50 + i})
    dataset = tt.TFRecordDataset(
        str(tmp_path / "train-*.tfrecord"),
        spec={"id": "int"},
        batch_size=8,
        shuffle="global",
        seed=7,
        rank=0,
        world_size=2,
        drop_last=False,
    )
    dataset.load_state_dict(golden["state"])
    rest = [batch["id"].tolist() for batch in dataset]
    assert rest == golden["rest"] and len(rest) == 5
