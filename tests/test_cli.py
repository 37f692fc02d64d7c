from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from torch_tfrecord.cli import main
from torch_tfrecord.support.text import plural


def test_count(records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["count", str(records_dir / "plain.tfrecord"), str(records_dir / "gzip.tfrecord.gz")])
    out = capsys.readouterr().out
    assert status == 0
    assert "11  " in out and out.strip().splitlines()[-1].split() == ["22", "total"]


def test_count_reports_damaged_file(records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["count", str(records_dir / "truncated_payload.tfrecord"), str(records_dir / "plain.tfrecord")]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "ERROR" in out and "at byte 56 (record 3)" in out and "11  total" in out


def test_verify_good_and_bad(tmp_path: Path, records_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ["plain.tfrecord", "gzip.tfrecord.gz", "flipped_payload.tfrecord"]:
        shutil.copyfile(records_dir / name, tmp_path / name)
    assert main(["verify", str(tmp_path / "plain.tfrecord"), str(tmp_path / "gzip.tfrecord.gz")]) == 0
    assert "2 of 2 files OK" in capsys.readouterr().out
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert (
        "BAD  " in out
        and "1 problem" in out
        and "data CRC mismatch" in out
        and "at byte 56 (record 3)" in out
    )
    assert "2 of 3 files OK" in out


def test_verify_finds_stale_index(
    golden_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = golden_copy("plain.tfrecord")
    (path.parent / "plain.tfrecord.idx").write_text("0 16\n16 17\n")
    assert main(["verify", str(path)]) == 1
    assert "StaleIndexError" in capsys.readouterr().out


def test_missing_source_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["count", str(tmp_path / "nope.tfrecord")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_console_script_and_module_entry(records_dir: Path) -> None:
    script = shutil.which("torch-tfrecord", path=str(Path(sys.executable).parent))
    commands = [[sys.executable, "-m", "torch_tfrecord"]] + ([[script]] if script else [])
    for command in commands:
        result = subprocess.run(
            [*command, "count", str(records_dir / "plain.tfrecord")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "11  total" in result.stdout


def test_building_the_parser_imports_no_reader() -> None:
    # each command imports what it reads with: `view` prints its address before numpy is loaded
    code = (
        "import sys\n"
        "from torch_tfrecord.cli.main import build_parser\n"
        "build_parser().parse_args(['count', 'x'])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'google', 'fsspec', 'torch'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


_WITHOUT_TORCH = """
import sys
from torch_tfrecord.cli import main
for argv in {commands!r}:
    assert main(argv) in (0, 1), argv
loaded = sorted(name for name in sys.modules if name == "torch" or name.startswith("torch."))
assert not loaded, loaded
"""


def _run_without_torch(commands: list[list[str]]) -> str:
    """Runs the commands in a fresh interpreter, which fails if any of them imported torch."""
    code = _WITHOUT_TORCH.format(commands=commands)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_inspecting_commands_never_import_torch(golden_copy: Callable[[str], Path]) -> None:
    # count, verify and head only read records: they start in a fraction of the time without torch.
    plain, gzip = str(golden_copy("plain.tfrecord")), str(golden_copy("gzip.tfrecord.gz"))
    damaged = str(golden_copy("flipped_payload.tfrecord"))
    commands = [
        ["count", plain, gzip],
        ["verify", plain, gzip, damaged],
        ["head", plain, "-n", "2"],
        ["head", gzip, "--json"],
    ]
    out = _run_without_torch(commands)
    assert "11  total" not in out and "22  total" in out  # the commands ran
    assert "BAD  " in out and '"features"' in out


def test_preview_never_imports_torch(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    import io

    import torch_tfrecord as tt

    buffer = io.BytesIO()
    image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    with tt.RecordWriter(str(tmp_path / "images.tfrecord")) as writer:
        writer.write(tt.encode_example({"image/encoded": buffer.getvalue(), "label": 1}))
    commands = [["preview", str(tmp_path / "images.tfrecord"), "--out", str(tmp_path / "grid.png")]]
    assert "1 record, " in _run_without_torch(commands)
    assert (tmp_path / "grid.png").exists()


def test_public_names_are_imported_on_first_use() -> None:
    code = """
import sys
import torch_tfrecord as tt
assert "torch" not in sys.modules
assert set(tt.__all__) <= set(dir(tt))
assert set(tt.__all__) == set(tt._EXPORTS), set(tt.__all__) ^ set(tt._EXPORTS)  # a new name goes in both
import torch_tfrecord.data.dataset  # binds submodules on the package: tt.collate stays the function
assert callable(tt.collate) and tt.collate.__module__ == "torch_tfrecord.data.transport.collate", tt.collate
assert tt.TFRecordDataset.__module__ == "torch_tfrecord.data.dataset"
assert tt.native.decoder() in ("native", "python")
for name in tt.__all__:
    getattr(tt, name)
try:
    tt.TFRecordDatset
except AttributeError as error:
    assert "TFRecordDatset" in str(error)
else:
    raise AssertionError("a misspelt name must raise AttributeError")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_verify_lists_every_damaged_record_with_its_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch_tfrecord as tt

    path = tmp_path / "two-bad.tfrecord"
    with tt.RecordWriter(str(path), write_index=False) as writer:
        for i in range(5):
            writer.write(bytes([i]) * 20)
    data = bytearray(path.read_bytes())
    for record in (1, 3):  # one payload byte of each: the framing still chains
        data[record * 36 + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "2 problems" in out and "at byte 36 (record 1)" in out and "at byte 108 (record 3)" in out


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _subcommands(sub, f"{prefix} {name}")
    return found


@pytest.mark.parametrize("module", ["torch_tfrecord.cli", "index_tools.cli"])
def test_every_command_has_an_example_and_every_argument_help(module: str) -> None:
    parser = importlib.import_module(module).build_parser()
    for name, command in _subcommands(parser, parser.prog):
        assert command.epilog and "example:" in command.epilog, name
        for action in command._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{name}: {action.dest} has no help"
        if name != parser.prog and not any(
            isinstance(a, argparse._SubParsersAction) for a in command._actions
        ):
            # --debug is accepted after the subcommand too
            assert "--debug" in command._option_string_actions, name


def test_csv_help_speaks_only_of_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["convert", "csv", "--help"])
    csv_help = capsys.readouterr().out
    assert "--reencode" not in csv_help and "--label-map" not in csv_help and "--delimiter" in csv_help
    with pytest.raises(SystemExit):
        main(["convert", "image-folder", "--help"])
    assert "--reencode" in capsys.readouterr().out


def test_plural() -> None:
    assert plural(1, "shard") == "1 shard"
    assert [plural(n, "record") for n in (0, 2, 1234)] == ["0 records", "2 records", "1,234 records"]
    assert plural(1, "index", "indexes") == "1 index" and plural(3, "index", "indexes") == "3 indexes"


def test_counts_in_the_output_agree_with_their_nouns(
    golden_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(golden_copy("plain.tfrecord"))
    assert main(["verify", path]) == 0
    assert "1 of 1 file OK" in capsys.readouterr().out
    damaged = str(golden_copy("flipped_payload.tfrecord"))
    assert main(["verify", damaged]) == 1
    assert "1 problem\n" in capsys.readouterr().out


def test_every_tool_names_the_same_damaged_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes inserted into record 0: its data CRC fails, and the header after it is garbage.
    count, build_index and `tfrecord-index build` (header walks) used to name record 1 there."""
    import torch_tfrecord as tt
    from index_tools.cli import main as index_main
    from torch_tfrecord.records.framing import encode_record

    first = encode_record(bytes(range(200)))
    framed = first[:80] + b"inserted" + first[80:] + encode_record(b"next") + encode_record(b"last")
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(framed)
    truth = "data CRC mismatch in '" + str(path) + "' at byte 0 (record 0)"
    with pytest.raises(tt.CorruptRecordError, match=r"at byte 0 \(record 0\)") as sequential:
        list(tt.read_records(path))
    assert str(sequential.value).startswith(truth)
    for call in (lambda: tt.count_records(path), lambda: tt.build_index(path)):
        with pytest.raises(tt.CorruptRecordError) as walked:
            call()
        assert str(walked.value) == str(sequential.value) and walked.value.record == 0
    assert main(["count", str(path)]) == 1
    assert truth in capsys.readouterr().out
    assert main(["verify", str(path)]) == 1
    assert truth in capsys.readouterr().out
    assert index_main(["build", "-j", "1", "-q", str(path)]) == 1
    assert truth in capsys.readouterr().err
    # A header that is bad on its own (the record before it intact) is still named as such.
    path.write_bytes(encode_record(b"good") + b"\xff" * 16)
    with pytest.raises(tt.CorruptRecordError, match=r"length CRC mismatch .* at byte 20 \(record 1\)"):
        tt.count_records(path)


def test_head_says_1_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_tfrecord.records.framing import encode_record

    path = tmp_path / "one.tfrecord"
    path.write_bytes(encode_record(b"\x01") + encode_record(b"\xff\xfe"))
    assert main(["head", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 byte," in out and "<1 byte 01>" in out and "2 bytes" in out and "1 bytes" not in out


def test_schema_never_imports_torch_and_prints_the_spec_infer_spec_makes(tmp_path: Path) -> None:
    import torch_tfrecord as tt

    path = tmp_path / "examples.tfrecord"
    png = b"\x89PNG\r\n\x1a\n" + bytes(20)
    with tt.ExampleWriter(str(path)) as writer:
        for i in range(6):
            writer.write(
                {
                    "label": i,
                    "pair": [i, i + 1],
                    "score": [0.5] * (i % 3),  # lengths vary, some records set no list
                    "name": f"item {i}",
                    "image": tt.BytesList([png]),
                    **({"optional": [1.5]} if i % 2 else {}),
                }
            )
    out = _run_without_torch([["schema", str(path)]])
    spec = tt.infer_spec(path)
    assert out.endswith("spec = " + repr(spec) + "\n")  # the code pasted is the spec's own repr
    assert "tt.Image(mode='RGB')" in out and "tt.FixedLen(shape=(2,), dtype=torch.int64)" in out
    assert "tt.VarLen(dtype=torch.float32)," in out and "no values in 2 of 6 records" in out


def test_schema_and_head_of_sequence_examples_never_import_torch() -> None:
    import torch_tfrecord as tt

    path = Path(__file__).parent / "data" / "examples" / "sequences.tfrecord"  # written by TensorFlow
    out = _run_without_torch([["schema", str(path)], ["head", str(path), "-n", "1", "--json"]])
    specs = tt.infer_spec(path)
    # The code pasted is the specs' own repr, and how to pass them to the dataset.
    code = f"context_spec = {specs.context_spec!r}\nsequence_spec = {specs.sequence_spec!r}\n"
    assert code in out and "context_spec=context_spec, sequence_spec=sequence_spec)" in out
    assert '"feature_lists": {"frames": {"type": "float", "steps": [[0.0, 1.0, 2.0], ' in out
