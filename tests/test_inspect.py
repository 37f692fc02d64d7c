"""The inspection commands (`torch-tfrecord head | schema | preview`) and `convert` on the
command line: output, exit codes, one-line errors, --help with an example."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import torch_tfrecord as tt
from torch_tfrecord.cli import main
from torch_tfrecord.codec.inspect import format_text

PIL = pytest.importorskip("PIL")
from PIL import Image as PILImage  # noqa: E402

DATA = Path(__file__).parent / "data"


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    path = tmp_path / "examples.tfrecord"
    with tt.ExampleWriter(str(path)) as writer:
        for i in range(4):
            writer.write(
                {
                    "label": i,
                    "score": [0.5 * i, 1.0],
                    "name": tt.BytesList([f"item {i}".encode()]),
                    "blob": tt.BytesList([bytes(range(40))]),
                }
            )
    return path


def test_head_text_and_json(examples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["head", str(examples), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("record ") == 2 and f"{examples}#1" in out
    assert (
        "label  int64[1]  1" in out and "score  float[2]  0.5 1" in out and "name   bytes[1]  'item 1'" in out
    )
    assert "<40 bytes 000102030405060708090a0b0c0d0e0f1011121314151617...>" in out
    assert main(["head", str(examples), "--json", "-n", "10"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 4 and lines[3]["features"]["label"] == {"type": "int64", "values": [3]}
    assert base64.b64decode(lines[0]["features"]["blob"]["values"][0]) == bytes(range(40))
    assert "not an Example" in format_text(0, b"\xff\xff")


def test_schema_table_and_code_that_runs(examples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", str(examples)]) == 0
    out = capsys.readouterr().out
    table, code = out.split("# paste into your code:")
    assert (
        "label" in table and "FixedLen" in table and "VarLen" not in table.split("label")[1].splitlines()[0]
    )
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace["spec"] == {
        "blob": tt.FixedLen((), bytes),
        "label": tt.FixedLen((), torch.int64),
        "name": tt.FixedLen((), bytes),
        "score": tt.FixedLen((2,), torch.float32),
    }


def test_preview_draws_images_labels_and_boxes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name, size in [("street.jpg", (200, 100)), ("park.png", (160, 120)), ("empty.jpg", (64, 48))]:
        PILImage.new("RGB", size, (90, 90, 90)).save(images / name)
    assert (
        main(
            [
                "convert",
                "coco",
                str(DATA / "coco" / "instances.json"),
                str(images),
                "--out",
                str(tmp_path / "out"),
                "-q",
            ]
        )
        == 0
    )
    capsys.readouterr()
    grid = tmp_path / "grid.png"
    assert main(["preview", str(tmp_path / "out"), "--out", str(grid), "--cell", "128"]) == 0
    assert "3 records" in capsys.readouterr().out
    with PILImage.open(grid) as picture:
        pixels = np.asarray(picture.convert("RGB")).astype(int)
    gap = 8  # around and between the tiles
    assert pixels.shape == (gap + 2 * (128 + 16 + gap), gap + 2 * (128 + gap), 3)
    # The street's 'car' box (x 0.1..0.6 of the 128-wide, 64-high image at (0, 32) of its tile)
    # is drawn in its class colour on the grey image, the grey inside left alone.
    street = pixels[gap + 152 : gap + 152 + 144, gap : gap + 128]  # third tile (image ids 3, 7, 12)
    assert (street[32:96] != 90).any(axis=-1).sum() > 100
    assert (np.abs(street[60, 30:70] - 90) < 3).all()


@pytest.mark.parametrize("colour", [(200, 30, 30), (24, 24, 24), (150, 150, 150)])
def test_preview_tiles_of_one_colour_stay_apart(colour: tuple[int, int, int]) -> None:
    # Same-coloured neighbours used to touch and read as one band. Whatever the images' colour
    # (even the background's or the frame's), a line across two neighbours crosses something else.
    from torch_tfrecord.vision.preview import render_grid

    buffer = io.BytesIO()
    PILImage.new("RGB", (40, 40), colour).save(buffer, format="PNG")
    records = [tt.encode_example({"image/encoded": buffer.getvalue(), "label": i}) for i in range(4)]
    pixels = np.asarray(render_grid(records, cell=40, columns=2)).astype(int)
    gap, caption = 8, 16
    assert pixels.shape == (gap + 2 * (40 + caption + gap), gap + 2 * (40 + gap), 3)
    middle_row = pixels[gap + 20]  # through images 0 and 1
    assert (middle_row[gap : gap + 40] == colour).all()
    assert (middle_row[2 * gap + 40 : 2 * gap + 80] == colour).all()
    between = middle_row[gap + 40 : 2 * gap + 40]
    assert (between[[0, -1]] == (150, 150, 150)).all()  # each image's frame
    assert (between[1:-1] == (24, 24, 24)).all()  # the background between them
    assert (between != colour).any(axis=-1).sum() >= 2
    middle_column = pixels[:, gap + 20]  # through images 0 and 2, across the caption band
    below = middle_column[gap + 40 : 2 * gap + 40 + caption]
    assert (below != colour).any(axis=-1).sum() >= 2


def test_convert_cli_summary_and_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = tmp_path / "images"
    images.mkdir()
    PILImage.new("RGB", (200, 100)).save(images / "street.jpg")
    PILImage.new("RGB", (160, 120)).save(images / "park.png")
    status = main(
        ["convert", "coco", str(DATA / "coco" / "instances.json"), str(images), "--out", str(tmp_path / "o")]
    )
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in err
    assert err.startswith("torch-tfrecord: error: ") and "empty.jpg" in err and "does not exist" in err
    assert len(err.strip().splitlines()) == 1
    status = main(
        [
            "convert",
            "coco",
            str(DATA / "coco" / "instances.json"),
            str(images),
            "--out",
            str(tmp_path / "o"),
            "--on-error",
            "skip",
            "--split",
            "train=0.5,val=0.5",
            "--jobs",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0 and "skipped 1 bad input:" in out and "2 records written" in out
    assert "train: " in out and "val: " in out and "label map:" in out


def test_convert_cli_uses_processes_only_to_reencode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Default --jobs: 1 for images stored as they are, the CPU count with --reencode
    (benchmarks/bench_convert.py measured where processes pay); --jobs overrides both."""
    import os

    from torch_tfrecord import convert

    jobs: list[int] = []
    real = convert.write_records

    def recording(tasks, encode, options):  # type: ignore[no-untyped-def]
        jobs.append(options.jobs)
        return real(tasks, encode, options)

    monkeypatch.setattr(convert, "write_records", recording)
    for name in ("cat", "dog"):
        (tmp_path / "images" / name).mkdir(parents=True)
        PILImage.new("RGB", (32, 24)).save(tmp_path / "images" / name / "a.jpg")
    for extra in ([], ["--reencode"], ["--jobs", "1", "--reencode"]):
        argv = ["convert", "image-folder", str(tmp_path / "images"), "--out", str(tmp_path / f"o{len(jobs)}")]
        assert main([*argv, *extra, "--quiet"]) == 0
    assert jobs == [1, os.cpu_count() or 1, 1]
    assert (
        main(["convert", "image-folder", str(tmp_path / "images"), "--out", str(tmp_path / "z"), "-j", "0"])
        == 2
    )
    assert "jobs=0 must be positive" in capsys.readouterr().err


def test_every_command_has_help_with_an_example() -> None:
    for command in (
        ["head"],
        ["schema"],
        ["count"],
        ["verify"],
        ["preview"],
        ["convert"],
        ["convert", "coco"],
        ["convert", "voc"],
        ["convert", "csv"],
        ["convert", "image-folder"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "torch_tfrecord", *command, "--help"], capture_output=True, text=True
        )
        assert result.returncode == 0 and "example:\n  torch-tfrecord " in result.stdout, command


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.tfrecord")
    plain = subprocess.run(
        [sys.executable, "-m", "torch_tfrecord", "head", missing], capture_output=True, text=True
    )
    assert (
        plain.returncode == 2
        and plain.stderr.count("\n") == 1
        and "no such file or directory" in plain.stderr
    )
    debug = subprocess.run(
        [sys.executable, "-m", "torch_tfrecord", "--debug", "head", missing], capture_output=True, text=True
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_head_and_schema_doubt_records_that_only_parse_as_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_schema import elwc_record

    path = tmp_path / "elwc.tfrecord"
    with tt.RecordWriter(path) as writer:
        writer.write(elwc_record())
    assert main(["head", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning: 2 of 2 feature names hold control characters" in out and "tt.read_records" in out
    # Control characters are escaped: one line per feature, the layout intact.
    assert "  \\n\\x05score\\x12" in out and len(out.splitlines()) == 4
    assert main(["head", str(path), "--json"]) == 0
    assert "ExampleListWithContext" in json.loads(capsys.readouterr().out)["warning"]
    assert main(["schema", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warning: ") and "paste into your code" not in out
    assert "\\n\\x05score\\x12" in out and "\x05" not in out


def test_schema_shows_unknown_types_and_one_dtype_rendering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_schema import _with_empty_feature

    path = tmp_path / "csv.tfrecord"
    with tt.RecordWriter(path) as writer:
        for i in range(3):
            writer.write(_with_empty_feature({"name": tt.BytesList([b"x"]), "label": i}, "comment"))
    assert main(["schema", str(path)]) == 0
    table, code = capsys.readouterr().out.split("# paste into your code:")
    rows = {line.split()[0]: line for line in table.splitlines()[1:] if line.strip()}
    assert "FixedLen  shape=(), dtype=bytes" in rows["name"] and "<class" not in table
    assert rows["comment"].split()[1:4] == ["VarLen", "dtype=torch.float32", "type"]
    assert "type unknown: no values in any of the 3 records" in rows["comment"]
    assert "shape=(0,)" not in table and "# type unknown" in code


SEQUENCES = DATA / "examples" / "sequences.tfrecord"  # written by TensorFlow (make_examples_golden.py)


def test_head_shows_feature_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["head", str(SEQUENCES), "-n", "3"]) == 0
    records = capsys.readouterr().out.split("record ")[1:]
    first = records[0].splitlines()
    assert first[0].endswith("168 bytes, a SequenceExample")
    assert first[1:] == [
        "  context: 2 features",
        "    id      bytes[1]  'first'",
        "    length  int64[1]  3",
        "  feature lists: 3 lists",
        "    frames  float, 3 steps  [0 1 2] [3 4 5] [6 7 8]",
        "    ids     int64, 3 steps  [1] [2 3] []",
        "    words   bytes, 3 steps  ['a'] ['bb'] ['ccc']",
    ]
    assert "feature lists: 2 lists" in records[1] and "words" not in records[1]
    assert "    frames  0 steps" in records[2].splitlines()
    many = tt.encode_sequence_example({}, {"t": [[i] for i in range(6)]})
    assert format_text(0, many).endswith("t  int64, 6 steps  [0] [1] [2] [3] ... (2 more steps)")
    assert main(["head", str(SEQUENCES), "--json", "-n", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "features" not in lines[0] and lines[0]["context"]["length"] == {"type": "int64", "values": [3]}
    assert lines[0]["feature_lists"]["frames"] == {
        "type": "float",
        "steps": [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
    }
    assert [base64.b64decode(s[0]) for s in lines[0]["feature_lists"]["words"]["steps"]] == [
        b"a",
        b"bb",
        b"ccc",
    ]
    assert lines[0]["feature_lists"]["ids"]["steps"] == [[1], [2, 3], []]
    assert sorted(lines[1]["feature_lists"]) == ["frames", "ids"]


def test_schema_of_sequence_examples_tables_and_code_that_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from test_payloads import CONTEXT_SPEC, SEQUENCE_SPEC

    assert main(["schema", str(SEQUENCES)]) == 0
    out = capsys.readouterr().out
    table, code = out.split("# paste into your code:")
    assert table.startswith("SequenceExamples (3 records read): 2 context features, 3 feature lists")
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:] if line.strip()}
    assert rows["context"][:3] == ["context", "feature", "spec"] and rows["length"][1] == "FixedLen"
    assert rows["feature"][:3] == ["feature", "list", "steps"]
    assert rows["frames"][1:4] == ["0-3", "FixedLenSequence", "shape=(3,),"]
    assert rows["ids"][1:3] == ["0-3", "VarLen"] and rows["words"][-1] == "allow_missing=True"
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert namespace["context_spec"] == CONTEXT_SPEC and namespace["sequence_spec"] == SEQUENCE_SPEC
    samples = sorted(namespace["ds"], key=lambda s: int(s["_record_id"]))  # the code's dataset reads
    expected = json.loads((DATA / "examples" / "expected.json").read_text())["sequences"]
    assert [s["_lengths"]["words"].item() for s in samples] == expected["lengths"]["words"]["values"]
    frames = torch.tensor(expected["sequences"]["frames"]["values"]).reshape(3, 3, 3)
    for sample, steps, padded in zip(samples, expected["lengths"]["frames"]["values"], frames):
        assert torch.equal(sample["frames"], padded[:steps])
