"""What users import does not move when the code inside does: ``tt.*``, the command lines' entry
points, and states saved by an earlier version. The public names are one table,
torch_tfrecord/__init__.pyi (what type checkers read, and what the package reads at import)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import torch_tfrecord as tt

DATA = Path(__file__).parent / "data"
STUB = Path(tt.__file__).with_suffix(".pyi")

PUBLIC = [
    "PADDING_KEY", "RECORD_ID_KEY", "BucketedDataset", "BytesList", "CompressedIndex",
    "CompressedIndexError", "CorruptRecordError", "DamagedRegion", "EpochPlan", "ExampleDecodeError",
    "ExampleWriter", "FeatureError", "FeatureShapeError", "FeatureTypeError", "FixedLen",
    "FixedLenSequence", "FloatList", "Image", "IndexFormatError", "IndexedTFRecordDataset", "Int64List",
    "LoadStats", "MissingFeatureError", "MixedDataset", "PackedDataset", "Ragged", "RawTensor", "ReadStats",
    "RecordWriter", "RemoteIOError", "RowList", "Selection", "SelectionError", "ShardedExampleWriter",
    "SourceNotFoundError", "SpecError", "StaleIndexError", "TFRecordDataset", "TFRecordError",
    "TruncatedRecordError", "VarLen", "bucket", "build_compressed_index", "build_index", "check_index",
    "collate", "count_records", "decode_batch", "decode_example", "decode_sequence_batch",
    "decode_sequence_example", "default_index_path", "detection_spec", "encode_example",
    "encode_record", "encode_sequence_example", "from_parquet", "from_tfds", "infer_spec",
    "load_compressed_index", "load_index", "loader", "masked_crc32c", "mix", "pack", "read_records",
    "save_compressed_index", "save_index", "segmentation_spec", "select", "split_batch", "to_hf",
    "to_parquet", "write_dataset",
]  # fmt: skip


def _stub_table() -> dict[str, str]:
    """Each name the stub re-exports (``from .module import name as name``) and its module."""
    table = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name}: re-exported as itself, for type checkers"
                table[alias.name] = f"torch_tfrecord.{node.module}"
    return table


def test_the_public_names_are_pinned() -> None:
    assert tt.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(tt, name) is not None


def test_the_one_table_is_what_the_package_exports_and_where_each_name_lives() -> None:
    table = _stub_table()
    modules = {name: path for name, path in table.items() if name not in PUBLIC}
    expected = ["beam", "native", "order", "ray", "remote", "spark", "tfds"]
    assert sorted(modules) == sorted(tt._MODULES) == expected
    for name in PUBLIC:
        value = importlib.import_module(table[name]).__dict__[name]
        assert getattr(tt, name) is value, name
        defined = getattr(value, "__module__", None)
        assert defined in (None, table[name]), f"{name} is defined in {defined}"
    for name, path in modules.items():
        try:
            module = importlib.import_module(f"{path}.{name}")
        except ImportError as error:  # an integration whose extra is missing here (tt.beam): it says so
            assert f"install the {name!r} extra" in str(error), error
            continue
        assert getattr(tt, name) is module


@pytest.mark.parametrize("old", ["dataset", "spec", "reader", "writer", "index"])
def test_the_flat_modules_of_before_the_layers_are_gone(old: str) -> None:
    """0.1.0 was never released: nobody imports ``torch_tfrecord.dataset`` and its siblings."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"torch_tfrecord.{old}")


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
