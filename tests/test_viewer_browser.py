"""The viewer's page driven in a real browser: Playwright for Python and Debian's chromium
(``/usr/bin/chromium``; ``.ci/run`` installs it), against ``torch-tfrecord view`` started for real."""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from system_programs import missing
from viewer_data import (
    GREY,
    INSTANCES,
    damage_record,
    write_detection,
    write_empty_records,
    write_instances,
    write_segmentation,
    write_sequences,
)
from viewer_server import CHROMIUM, CHROMIUM_ARGS, running_viewer

from torch_tfrecord.records.index import default_index_path, load_index

pytestmark = pytest.mark.skipif(missing("chromium") is not None, reason=str(missing("chromium")))
playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
expect = playwright_api.expect
pytest.importorskip("PIL", reason="the test data's images need Pillow")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("viewer")
    detection = write_detection(root / "detection")
    segmentation = write_segmentation(root / "segmentation")
    (root / "damaged").mkdir()
    damaged = Path(shutil.copy(detection, root / "damaged" / "damaged.tfrecord"))
    damage_record(damaged, 5)
    return {"detection": detection, "segmentation": segmentation, "damaged": damaged}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def viewer(data: dict[str, Path]) -> Iterator[str]:
    paths = [str(data["detection"].parent), str(data["segmentation"]), str(data["damaged"])]
    with running_viewer(*paths) as (url, _):
        yield url


@contextlib.contextmanager
def _browsing(browser: Any, viewer: str) -> Iterator[Any]:
    """A page of the viewer at ``viewer`` that records every request it makes; none may go
    elsewhere."""
    context = browser.new_context()
    page = context.new_page()
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.viewer = viewer
    yield page
    host = urllib.parse.urlsplit(viewer).netloc
    outside = [url for url in page.requests if urllib.parse.urlsplit(url).netloc != host]
    assert page.requests and not outside, f"requests to elsewhere: {outside}"
    context.close()


@pytest.fixture
def page(browser: Any, viewer: str) -> Iterator[Any]:
    """A page of the module's viewer."""
    with _browsing(browser, viewer) as page:
        yield page


def _open(page: Any, fragment: str) -> None:
    page.goto(f"{page.viewer}#{fragment}")


def _numbers(page: Any) -> list[int]:
    return [
        int(n) for n in page.locator("article.record").evaluate_all("els => els.map(e => e.dataset.number)")
    ]


def test_records_are_paged(page: Any) -> None:
    _open(page, "records/0/0")
    expect(page.locator("#range")).to_have_text("records 0\u201319 of 60")
    assert _numbers(page) == list(range(20))
    page.click("#next")
    expect(page.locator("#range")).to_have_text("records 20\u201339 of 60")
    assert _numbers(page) == list(range(20, 40))
    assert page.locator("#record-25 tr[data-key='caption'] .values").inner_text() == '"record number 25"'
    page.click("#last")
    expect(page.locator("#range")).to_have_text("records 40\u201359 of 60")
    assert _numbers(page)[-1] == 59


def test_jump_to_a_record_and_to_a_byte_offset(page: Any, data: dict[str, Path]) -> None:
    _open(page, "records/0/0")
    page.fill("#jump-record", "45")
    page.press("#jump-record", "Enter")
    page.wait_for_selector("#record-45.target")
    assert _numbers(page)[0] == 45
    offset = int(load_index(default_index_path(str(data["detection"])))[11, 0])
    page.fill("#jump-offset", str(offset + 20))  # a byte inside record 11
    page.press("#jump-offset", "Enter")
    page.wait_for_selector("#record-11.target")
    assert _numbers(page)[0] == 11
    assert f"byte {offset:,}" in page.inner_text("#record-11 h3")


def _pixels(page: Any, selector: str, points: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    page.wait_for_selector(f"{selector}[data-ready='1']")
    script = """([selector, points]) => {
        const canvas = document.querySelector(selector);
        const ctx = canvas.getContext('2d');
        return points.map(([x, y]) => Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3)));
    }"""
    return [tuple(p) for p in page.evaluate(script, [selector, points])]


def test_an_image_with_its_box_drawn_at_the_right_pixels(page: Any) -> None:
    # Record 0: a grey 64x48 image, its box from (16, 12) to (48, 36), class 1 (green, line 2 px).
    _open(page, "records/0/0")
    green = (60, 180, 75)
    left, right, outside, inside = (16, 32), (47, 32), (14, 32), (32, 32)  # the name's tab: y 14-29
    pixels = _pixels(
        page, "#record-0 canvas", [left, (17, 32), right, (46, 32), (32, 35), outside, inside, (18, 32)]
    )
    assert pixels[:5] == [green] * 5
    assert pixels[5:] == [GREY] * 3
    assert page.locator("#record-0 canvas").evaluate("c => [c.width, c.height]") == [64, 48]


def test_a_class_mask_laid_over_its_image(page: Any) -> None:
    # The black 40x30 image's mask holds class 3 (Pascal VOC's olive, 128,128,0) for x, y in [10, 20).
    _open(page, "records/1/0")
    inside, outside = _pixels(page, "#record-0 canvas", [(15, 15), (5, 5)])
    assert all(abs(a - b) <= 2 for a, b in zip(inside, (64, 64, 0), strict=True)), inside
    assert outside == (0, 0, 0)


def _blend(colour: tuple[int, ...], weight: str) -> tuple[int, ...]:
    """A grey pixel tinted half-way to the palette colour ``weight`` (#rrggbb)."""
    tint = [int(weight[i : i + 2], 16) for i in (1, 3, 5)]
    return tuple((c + t) >> 1 for c, t in zip(colour, tint, strict=True))


@pytest.fixture(scope="module")
def more(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second viewer: SequenceExamples (file 0) and a record with instance masks (file 1)."""
    root = tmp_path_factory.mktemp("viewer-more")
    with running_viewer(
        str(write_sequences(root / "sequences")), str(write_instances(root / "instances"))
    ) as (
        url,
        _,
    ):
        yield url


def test_instance_masks_drawn_over_the_image_each_in_its_object_colour(browser: Any, more: str) -> None:
    # Two objects of the same class: each mask (stored as 1 on the object, 0 elsewhere) tinted
    # half-way to its own colour, that of its box; pixels of a box outside its mask stay grey.
    with _browsing(browser, more) as page:
        _open(page, "records/1/0")
        (box0, mask0), (box1, mask1) = INSTANCES
        y = 28  # below the boxes' name tabs
        points = [(mask0[0] + 3, y), (mask1[2] - 3, y), (mask0[2] + 2, y), (box1[0] + 3, y), (1, 1)]
        pixels = _pixels(page, "#record-0 canvas", points)
        assert pixels == [_blend(GREY, "#e6194b"), _blend(GREY, "#3cb44b"), GREY, GREY, GREY], pixels
        # each box in its object's colour: its left edge
        edges = _pixels(page, "#record-0 canvas", [(box0[0], 32), (box1[0], 32)])
        assert edges == [(230, 25, 75), (60, 180, 75)]


def test_a_sequence_example_record(browser: Any, more: str) -> None:
    with _browsing(browser, more) as page:
        _open(page, "records/0/2")
        page.wait_for_selector("#record-2.target")
        assert "sequence" in page.inner_text("#record-2 h3")
        assert page.inner_text("#record-2 tr[data-key='id'] .values") == "2"
        tokens = page.locator("#record-2 tr[data-key='tokens']")
        assert tokens.locator(".kind").inner_text() == "int64 list \u00b7 3 steps"
        assert tokens.locator(".values").inner_text() == "[0, 0] [1, 1] [2, 2]"


def test_an_index_built_with_its_progress_then_jumps(browser: Any, tmp_path: Path) -> None:
    # 2,000,000 empty records (32 MB): the header walk takes seconds, the progress shows
    path = write_empty_records(tmp_path / "empty.tfrecord", 2_000_000)
    with running_viewer(str(path)) as (url, _), _browsing(browser, url) as page:
        _open(page, "records/0/0")
        page.wait_for_selector("#record-19")
        seen: list[float] = []
        while not re.search("of 2,000,000$", page.inner_text("#range")):
            seen.extend(page.locator("progress").evaluate_all("bars => bars.map(b => b.value)"))
            page.wait_for_timeout(100)
        assert any(0 < value < 1 for value in seen), seen
        assert page.inner_text("#no-jump") == ""
        page.fill("#jump-record", "1999995")
        page.press("#jump-record", "Enter")
        page.wait_for_selector("#record-1999995.target")
        assert page.inner_text("#range") == "records 1999995\u20131999999 of 2,000,000"
        page.fill("#jump-offset", str(16 * 1_234_567 + 7))
        page.press("#jump-offset", "Enter")
        page.wait_for_selector("#record-1234567.target")


def test_open_hands_the_url_to_the_browser(browser: Any, data: dict[str, Path], tmp_path: Path) -> None:
    # webbrowser runs the command in $BROWSER (%s: the URL): here a script that writes it down
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.py"
    script.write_text("import pathlib, sys\npathlib.Path(sys.argv[2]).write_text(sys.argv[1])\n")
    env = {"BROWSER": f"{sys.executable} {script} %s {opened}"}
    with running_viewer(str(data["detection"]), "--open", env=env) as (url, _):
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opened.read_text() == url
        with _browsing(browser, opened.read_text()) as page:
            page.goto(page.viewer)
            expect(page.locator("#files tr td a")).to_have_text(str(data["detection"]))


def test_the_schema(page: Any) -> None:
    _open(page, "schema")
    page.wait_for_selector("table.schema")
    assert page.inner_text("h2") == "Schema (from 122 records)"  # 60 + 3 + 59 intact ones
    assert page.inner_text("tr[data-key='image/encoded'] td:nth-child(2)") == "Image"
    assert "torch.int64" in page.inner_text("tr[data-key='label']")  # not in the segmentation records
    assert "VarLen" in page.inner_text("tr[data-key='image/object/bbox/xmin']")
    assert "'caption': tt.VarLen(dtype=bytes)" in page.inner_text("pre")


def test_a_filter_links_to_the_records_it_found(page: Any) -> None:
    _open(page, "search/" + urllib.parse.quote("label == 3"))
    expect(page.locator("#search-state")).to_have_text(re.compile("done$"))
    links = page.locator("#matches a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    # detection.tfrecord (file 0) and its damaged copy (file 2, record 5 unreadable), records 3, 8, ...
    assert links[:12] == [f"#records/0/{n}" for n in range(3, 60, 5)]
    assert links[12:] == [f"#records/2/{n}" for n in range(3, 60, 5)]
    page.click("#matches a >> nth=1")
    page.wait_for_selector("#record-8.target")
    assert page.locator("#record-8 tr[data-key='label'] .values").inner_text() == "3"


def test_a_filters_matches_saved_as_a_selection(browser: Any, data: dict[str, Path], tmp_path: Path) -> None:
    import torch_tfrecord as tt

    with running_viewer(str(data["detection"])) as (url, _), _browsing(browser, url) as page:
        _open(page, "search/" + urllib.parse.quote("label == 3 and image/object/class/label >= 4"))
        expect(page.locator("#search-state")).to_have_text(re.compile("done$"))
        shown = page.locator("#matches a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        with page.expect_download() as waiting:
            page.click("#save-selection")
        download = waiting.value
        assert download.suggested_filename == "selection.ttsel"
        expect(page.locator("#selection-state")).to_have_text(" saved selection.ttsel")
        selection = tt.Selection.from_bytes(Path(download.path()).read_bytes())
        assert [f"#records/0/{n}" for n in selection.record_ids().tolist()] == shown != []
        assert selection == tt.select(
            str(data["detection"]), where="label == 3 and image/object/class/label >= 4"
        )
        _open(page, "search/" + urllib.parse.quote("label == 99"))
        expect(page.locator("#search-state")).to_have_text(re.compile("done$"))
        page.click("#save-selection")
        expect(page.locator("#selection-state")).to_contain_text("no record passes `label == 99`")


def test_statistics_finish_and_count_values(page: Any) -> None:
    _open(page, "statistics")
    expect(page.locator("#stats-state")).to_have_text("complete", timeout=20_000)
    assert page.inner_text("h2").startswith("Statistics of 122 records")
    row = page.locator("#statistics tr[data-key='label']")
    assert row.locator(".present").inner_text() == "119 (98%)"  # not in the 3 segmentation records
    top = row.locator(".top div").all_inner_texts()
    # each label value in 12 records of each copy, but record 5 (label 0) of the damaged one is lost
    assert sorted(top) == [f"{label} \u00d7{24 - (label == 0)}" for label in range(5)]
    heights = row.locator(".bars div").evaluate_all("bars => bars.map(b => b.offsetHeight)")
    assert len(heights) == 20 and max(heights) == 40 and sorted(heights)[-6] == 1  # 5 values of 20 bins


def test_a_damaged_file_is_shown_as_damaged(page: Any) -> None:
    _open(page, "files")
    expect(page.locator("#files .badge.bad")).to_have_count(1)
    row = page.locator("#files tr.damaged")
    assert "damaged.tfrecord" in row.inner_text() and "CRC" in row.inner_text()
    _open(page, "records/2/0")
    page.wait_for_selector("#record-5.damaged")
    assert "CRC" in page.inner_text("#record-5")
    assert _numbers(page) == list(range(20))  # the others read as they are
    assert page.locator("#record-6 canvas").count() == 1


@pytest.fixture(scope="module")
def s3_shard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Any, Path]]:
    """A 10 MB detection shard and its index on a local S3 emulator (and a copy, bare.tfrecord,
    without an index), behind a proxy that counts requests; yields its URL, the storage options
    as JSON, the proxy and the local file."""
    pytest.importorskip("s3fs", reason="needs the remote extra")
    pytest.importorskip("moto", reason="needs moto[server]")
    import json

    import fsspec
    from remote_servers import FaultProxy, moto_server, s3_options

    folder = tmp_path_factory.mktemp("remote")
    path = write_detection(folder, records=200, name="big.tfrecord", padding=48 << 10)
    with moto_server() as endpoint, FaultProxy(endpoint) as proxy:
        options = s3_options(proxy.url)
        filesystem = fsspec.filesystem("s3", **options)
        filesystem.mkdir("bucket")
        filesystem.put(str(path), "bucket/data/big.tfrecord")
        filesystem.put(str(path) + ".idx", "bucket/data/big.tfrecord.idx")
        filesystem.put(str(path), "bucket/data/bare.tfrecord")  # no index beside it
        yield "s3://bucket/data/big.tfrecord", json.dumps(options), proxy, path


def test_a_remote_file_costs_a_few_ranged_requests(
    browser: Any, s3_shard: tuple[str, str, Any, Path]
) -> None:
    url, options, proxy, _ = s3_shard
    proxy.reset()
    with running_viewer(url, "--storage-options", options) as (viewer, _):
        context = browser.new_context()
        page = context.new_page()
        asked: list[str] = []
        page.on("request", lambda request: asked.append(urllib.parse.urlsplit(request.url).netloc))
        page.goto(f"{viewer}#records/0/0")
        page.wait_for_selector("#record-19 canvas[data-ready='1']")
        first = dict(proxy.requests), proxy.ranged_gets
        assert page.inner_text("#range") == "records 0\u201319 of 200"
        page.click("#last")
        page.wait_for_selector("#record-199 canvas[data-ready='1']")
        last = dict(proxy.requests), proxy.ranged_gets
        context.close()
    assert set(asked) == {urllib.parse.urlsplit(viewer).netloc}  # the browser asks the viewer only
    # the first page, its 20 images included: the index, the file's first bytes (is it compressed?)
    # and one range of the 10 MB shard; the last page: one more range. (The index is a ranged GET
    # too: it is read up to what an index of its shard can hold, issue 44, in one request.)
    assert first[0].get("GET", 0) <= 4 and first[1] <= 3, first
    assert last[0].get("GET", 0) - first[0].get("GET", 0) == 1 and last[1] - first[1] == 1, (first, last)


def test_a_remote_file_without_an_index_builds_one_when_asked(
    browser: Any, s3_shard: tuple[str, str, Any, Path]
) -> None:
    url, options, proxy, local = s3_shard
    bare = url.replace("big.tfrecord", "bare.tfrecord")
    with (
        running_viewer(bare, "--storage-options", options) as (viewer, _),
        _browsing(browser, viewer) as page,
    ):
        _open(page, "records/0/0")
        page.wait_for_selector("#record-19 canvas[data-ready='1']")
        assert page.inner_text("#range") == "records 0\u201319"  # paged from the start: no count
        # the page says why there is no jump, and what building the index costs
        assert "no index beside this remote file" in page.inner_text("#no-jump")
        page.click("#last")
        expect(page.locator("#status")).to_contain_text("no index beside this remote file")
        proxy.reset()
        page.click("#build-index")
        page.wait_for_selector("progress")  # building, with its progress
        expect(page.locator("#range")).to_have_text("records 0\u201319 of 200", timeout=60_000)
        # the header walk read the 10 MB through ranged requests, 8 MB at a time
        assert proxy.ranged_gets <= 3, proxy.requests
        assert page.inner_text("#no-jump") == ""
        offset = int(load_index(default_index_path(str(local)))[150, 0])
        page.fill("#jump-offset", str(offset + 9))
        page.press("#jump-offset", "Enter")
        page.wait_for_selector("#record-150.target canvas[data-ready='1']")
        assert f"byte {offset:,}" in page.inner_text("#record-150 h3")
