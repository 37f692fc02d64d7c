"""Per-feature statistics: presence, lengths, histograms, top values, and the records' count."""

from __future__ import annotations

from torch_tfrecord.viewer.statistics import FeatureStatistics


def test_presence_lengths_numbers_and_top_values() -> None:
    stats = FeatureStatistics()
    for number in range(10):
        features = {"label": ("int64", [number % 3]), "score": ("float", [number / 10, float("nan")])}
        if number % 2:
            features["text"] = ("bytes", [b"odd", b"\xff\x00"])
        stats.add(features)
    stats.add(None)  # not an Example: counted as a record, no features
    report = {f["key"]: f for f in stats.report()["features"]}
    assert stats.report()["records"] == 11
    label, score, text = report["label"], report["score"], report["text"]
    assert (label["present"], label["missing"], label["kind"]) == (10, 1, "int64")
    assert label["top"] == [[0, 4], [1, 3], [2, 3]]
    assert label["numbers"]["min"] == 0 and label["numbers"]["max"] == 2 and label["numbers"]["mean"] == 0.9
    assert sum(label["numbers"]["histogram"]["counts"]) == 10
    assert score["lengths"] == {"min": 2, "max": 2, "counts": [(2, 10)]}
    assert score["numbers"]["max"] == 0.9  # NaN left out of the numbers
    assert text["present"] == 5 and text["top"] == [["odd", 5], [{"bytes": 2, "hex": "ff00"}, 5]]


def test_images_are_counted_not_listed_and_distinct_values_are_capped() -> None:
    stats = FeatureStatistics()
    png = b"\x89PNG\r\n\x1a\n" + bytes(10)
    for number in range(10_050):
        stats.add({"image": ("bytes", [png]), "id": ("int64", [number])})
    report = {f["key"]: f for f in stats.report()["features"]}
    assert report["image"]["images"] == 10_050 and report["image"]["top"] == []
    assert report["id"]["approximate"] and len(report["id"]["top"]) == 10
