"""Writes the viewer's screenshots of docs/guides/viewer.md (docs/images/viewer-*.png): small
detection, segmentation and instance-mask files (tests/viewer_data.py), ``torch-tfrecord view``
started on them, and Debian's chromium driven by Playwright.

    python docs/images/viewer_screenshots.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
from viewer_data import damage_record, write_detection, write_instances, write_segmentation  # noqa: E402
from viewer_server import CHROMIUM, CHROMIUM_ARGS, running_viewer  # noqa: E402


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        detection = write_detection(root / "coco", records=60, size=(320, 240))
        segmentation = write_segmentation(root / "voc", records=2)
        (root / "damaged").mkdir()
        damaged = Path(shutil.copy(detection, root / "damaged" / "train-00001.tfrecord"))
        damage_record(damaged, 5)
        instances = write_instances(root / "instances", scale=5)
        paths = [str(detection.parent), str(segmentation), str(damaged), str(instances)]
        with running_viewer(*paths) as (url, _), sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 640})
            shots = [
                ("files", "files", "#files .verified .badge"),
                ("records", "records/0/40", "#record-41 canvas[data-ready='1']"),
                ("mask", "records/1/0", "#record-0 canvas[data-ready='1']"),
                ("instances", "records/3/0", "#record-0 canvas[data-ready='1']"),
                ("schema", "schema", "table.schema"),
                ("statistics", "statistics", "#stats-state.badge:not(.partial)"),
                ("filter", "search/label%20%3D%3D%203", "#matches li"),
            ]
            for name, fragment, ready in shots:
                page.goto(f"{url}#{fragment}")
                page.wait_for_selector(ready)
                time.sleep(0.3)
                page.screenshot(path=str(HERE / f"viewer-{name}.png"))
                print(f"wrote docs/images/viewer-{name}.png")
            browser.close()


if __name__ == "__main__":
    main()
