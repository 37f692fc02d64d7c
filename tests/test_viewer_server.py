"""``torch-tfrecord view`` as a process: the JSON API, who may ask (127.0.0.1 only by its own name;
elsewhere only with the token), a clean stop on Ctrl-C, and no torch imported."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from viewer_data import write_detection
from viewer_server import running_viewer

from torch_tfrecord.viewer import Catalog, make_server

pytest.importorskip("PIL", reason="the test data's images need Pillow")


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            kind = response.headers["Content-Type"]
            return response.status, json.loads(body) if kind == "application/json" else body
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def detection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_detection(tmp_path_factory.mktemp("viewer") / "data", records=30)


def test_the_api_without_torch_and_a_clean_stop_on_ctrl_c(detection: Path) -> None:
    with running_viewer(str(detection)) as (url, process):
        assert url.startswith("http://127.0.0.1:") and "token" not in url
        status, files = _get(url + "api/files")
        assert status == 200 and files["files"][0]["size"] == detection.stat().st_size
        status, page = _get(url + "api/records?file=0&start=28&count=5")
        assert status == 200 and [r["number"] for r in page["records"]] == [28, 29]
        while page["total"] is None:  # the index is loaded once the first page is served
            time.sleep(0.1)
            page = _get(url + "api/records?file=0&start=28&count=5")[1]
        assert page["total"] == 30
        assert page["records"][1]["boxes"][0]["name"] == "dog"  # class 29 % 7 + 1 = 2 in label_map.pbtxt
        status, image = _get(url + "api/blob?file=0&record=1&key=image/encoded")
        assert status == 200 and image.startswith(b"\x89PNG")
        assert _get(url + "api/records?file=3")[0] == 404
        assert _get(url + "api/records?file=0&count=0")[0] == 404
        assert _get(url + "api/locate?file=0")[0] == 400
        assert _get(url + "api/search?q=label%20%3D%3D")[0] == 422
        assert _get(url + "api/blob?file=0&record=1&key=nope")[0] == 404
        assert _get(url + "nothing")[0] == 404
        # a page elsewhere that rebinds its name to 127.0.0.1 is refused
        port = urllib.parse.urlsplit(url).port
        assert _get(url + "api/files", {"Host": f"attacker.example:{port}"})[0] == 403
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "stopped" in stderr and "Traceback" not in stderr


def test_a_filters_matches_saved_as_a_selection_file(detection: Path) -> None:
    """``/api/selection``: every record the filter page would show, in a .ttsel file (no torch in
    the viewer); a dataset of the same file reads exactly those records."""
    import torch_tfrecord as tt

    with running_viewer(str(detection)) as (url, _):
        status, body = _get(url + "api/selection?q=" + urllib.parse.quote("label == 3"))
        assert status == 200
        selection = tt.Selection.from_bytes(body)
        assert selection.record_ids().tolist() == [3, 8, 13, 18, 23, 28] and selection.where == "label == 3"
        dataset = tt.TFRecordDataset(str(detection), spec={"label": "int"}, select=selection)
        assert sorted(int(sample["label"][0]) for sample in dataset) == [3] * 6
        status, answer = _get(url + "api/selection?q=" + urllib.parse.quote("label == 99"))
        assert status == 422 and "no record passes `label == 99` (of 30 records" in answer["error"]


def test_an_index_build_waits_for_the_first_page(tmp_path: Path) -> None:
    path = write_detection(tmp_path, records=30)
    Path(str(path) + ".idx").unlink()
    with running_viewer(str(path)) as (url, _):
        time.sleep(1.0)  # listening, asked nothing: nothing is built
        status, files = _get(url + "api/files")
        assert status == 200 and files["files"][0]["state"] == "pending", files
        assert files["files"][0]["no_jump"] == "jumps wait for the index, which is being loaded or built"
        # once the server is quiet after that first page, the build begins and ends
        deadline = time.monotonic() + 30
        while files["files"][0]["verified"] != "ok" and time.monotonic() < deadline:
            time.sleep(0.05)
            files = _get(url + "api/files")[1]
        assert files["files"][0]["records"] == 30 and files["files"][0]["verified"] == "ok"


def test_the_page_is_served_while_the_catalog_is_made(detection: Path) -> None:
    # `view` prints its address before the catalog's imports: the page's assets come at once,
    # its questions wait for the catalog
    release = threading.Event()

    def make() -> Catalog:
        assert release.wait(30)
        return Catalog([str(detection)])

    server = make_server(make)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    try:
        status, html = _get(server.url)
        assert status == 200 and b"viewer.js" in html and not release.is_set()
        answer: list[Any] = []
        asking = threading.Thread(target=lambda: answer.append(_get(server.url + "api/files")))
        asking.start()
        asking.join(0.5)
        assert asking.is_alive()  # waiting for the catalog
        release.set()
        asking.join(30)
        assert answer[0][0] == 200 and answer[0][1]["files"][0]["path"] == str(detection)
    finally:
        server.shutdown()
        server.server_close()
        server.close_catalog()


def test_a_catalog_that_cannot_be_made_stops_the_server(tmp_path: Path) -> None:
    def make() -> Catalog:
        raise PermissionError(13, "Permission denied", str(tmp_path))

    server = make_server(make)
    server.serve_forever(poll_interval=0.05)  # returns: the catalog failed
    server.server_close()
    failure = server.catalog_failure()
    assert isinstance(failure, PermissionError) and str(tmp_path) in str(failure)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_another_host_needs_the_token(detection: Path) -> None:
    with running_viewer(str(detection), "--host", "0.0.0.0") as (url, _):
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query)["token"][0]
        assert len(token) >= 32
        bare = f"{parts.scheme}://{parts.netloc}/"
        assert _get(bare)[0] == 403
        assert _get(bare + "api/files")[0] == 403
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # (1 token in 64 ends in "x")
        assert _get(bare + "api/files?token=" + wrong)[0] == 403
        assert _get(bare + "api/files?token=" + token)[0] == 200
        status, html = _get(url)
        assert status == 200 and b"viewer.js" in html
        port = parts.port
    assert port is not None and not _listening(port)


def test_no_files_is_an_error_that_says_where(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch_tfrecord", "view", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "torch-tfrecord: error:" in result.stderr and str(tmp_path) in result.stderr
