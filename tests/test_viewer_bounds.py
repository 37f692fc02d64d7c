"""What a web page or a crafted file can make the viewer spend (issue 44): memory per page (a byte
budget; records too large to read whole described from their wire format), connections and
threads, time of idle clients, requests that read records at once, and requests from other
sites. Memory is measured with tracemalloc, in this process, around the catalog's calls.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tfrecord.codec.encode import FloatList, encode_example
from torch_tfrecord.codec.inspect import describe_feature_lists, describe_record
from torch_tfrecord.records.writer import RecordWriter
from torch_tfrecord.viewer import Catalog, ViewerError, make_server
from torch_tfrecord.viewer import server as server_module
from torch_tfrecord.viewer.pages import LARGE_RECORD, PAGE_BYTES, page_length
from torch_tfrecord.viewer.wire import Described, WireError, describe_payload, find_value

MB = 1 << 20
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def _write(path: Path, records: list[bytes], compression: str | None = None) -> Path:
    with RecordWriter(str(path), compression=compression) as writer:  # type: ignore[arg-type]
        for record in records:
            writer.write(record)
    return path


def _peak(call: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _indexed(path: Path) -> Catalog:
    catalog = Catalog([str(path)])
    catalog.start()
    catalog.shards[0].wait(60)
    assert catalog.shards[0].state == "ready"
    return catalog


def test_a_page_of_50_mb_records_reads_none_of_them_whole(tmp_path: Path) -> None:
    """Issue 44: 20 records of 50 MB took 1.07 GB for one page. Each is now described from its
    wire format (kinds, counts, first bytes), its image fetched alone."""
    big = 50 * MB
    record = encode_example({"image/encoded": PNG + b"\0" * big, "label": [3], "score": FloatList([0.5])})
    path = _write(tmp_path / "big.tfrecord", [record] * 3)
    catalog = _indexed(path)
    page, peak = _peak(lambda: catalog.records(0, 0, 200))
    assert peak < 4 * MB, peak
    assert [r["number"] for r in page["records"]] == [0, 1, 2] and page["next"] == 3
    view = page["records"][1]
    assert view["summarised"] and view["kind"] == "example" and view["image"] == "image/encoded"
    assert view["size"] == len(record) and view["image_data"] is None
    features = {f["key"]: f for f in view["features"]}
    assert features["label"]["values"] == [3] and features["score"]["values"] == [0.5]
    assert features["image/encoded"]["count"] == 1
    with pytest.raises(ValueError, match="at most 33,554,432"):
        catalog.blob(0, 1, "image/encoded", 0)  # 50 MB: more than one value sent
    catalog.close()


def test_the_image_of_a_large_record_is_read_alone(tmp_path: Path) -> None:
    image = PNG + bytes(random.Random(4).randrange(256) for _ in range(3 * MB))
    record = encode_example({"image/encoded": image, "text": "a" * 300, "ids": list(range(5000))})
    catalog = _indexed(_write(tmp_path / "one.tfrecord", [record, encode_example({"x": [1]})]))
    (body, kind), peak = _peak(lambda: catalog.blob(0, 0, "image/encoded", 0))
    assert body == image and kind == "image/png" and peak < len(image) + 2 * MB
    view = catalog.records(0, 0, 2)["records"][0]
    features = {f["key"]: f for f in view["features"]}
    assert features["ids"]["count"] == 5000 and features["ids"]["values"] == list(range(32))
    assert features["text"]["values"] == [{"text": "a" * 200, "bytes": 300}]
    with pytest.raises(ViewerError, match="no bytes value 1"):
        catalog.blob(0, 0, "image/encoded", 1)
    catalog.close()


def test_a_gzip_record_that_inflates_to_100_mb_is_never_inflated_whole(tmp_path: Path) -> None:
    """Issue 44: a 300 KB .gz holding one 300 MB record cost 0.96 GB a request. The stream is
    walked: the record described as it passes (its CRC checked on the way), never held."""
    record = encode_example({"blob": b"\0" * (100 * MB), "label": [7]})
    path = _write(
        tmp_path / "bomb.tfrecord.gz",
        [encode_example({"n": [0]}), record, encode_example({"n": [2]})],
        "gzip",
    )
    assert path.stat().st_size < MB
    del record
    catalog = Catalog([str(path)])
    page, peak = _peak(lambda: catalog.records(0, 0, 20))
    assert peak < 8 * MB, peak
    assert [r["number"] for r in page["records"]] == [0, 1, 2]
    large = page["records"][1]
    assert large["summarised"] and large["error"] is None
    assert {f["key"]: f["values"] for f in large["features"]}["label"] == [7]
    catalog.close()


def test_a_page_stops_at_its_byte_budget(tmp_path: Path) -> None:
    record = encode_example({"blob": b"b" * (LARGE_RECORD // 2)})
    path = _write(tmp_path / "mid.tfrecord", [record] * 60)
    catalog = _indexed(path)
    page = catalog.records(0, 0, 200)
    fits = PAGE_BYTES // (len(record) + 16)
    assert len(page["records"]) == fits and page["next"] == fits
    assert catalog.records(0, page["next"], 200)["records"][0]["number"] == fits
    found = catalog.search("blob == x", 0, 0)  # searched chunk after chunk, every record
    assert found["scanned"] == 60 and found["next"] is None and found["skipped"] == 0
    catalog.close()


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([], 0),
        ([10] * 5, 5),
        ([LARGE_RECORD] * 40, 16),  # read whole: 16 MiB
        ([LARGE_RECORD + 1] * 40, 16),  # described: each counts 1 MiB
        ([MB // 2] * 40, 32),
        ([PAGE_BYTES * 4], 1),  # one at least
    ],
)
def test_page_length(sizes: list[int], expected: int) -> None:
    assert page_length(sizes) == expected


# ------------------------------------------------------------------ the wire walker


def _walk(payload: bytes, keep: int = 1024) -> Described:
    return describe_payload(lambda offset, size: payload[offset : offset + size], len(payload), keep)


_VALUES = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
    st.lists(st.floats(width=32, allow_nan=False), max_size=40).map(FloatList),
    st.lists(st.binary(max_size=700), max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _VALUES, max_size=5))
def test_the_walker_describes_what_protobuf_reads(features: dict[str, Any]) -> None:
    """Property: kinds, counts and values (bytes by their first 256 bytes and their size) as
    protobuf reads them, and each bytes value found where it lies."""
    payload = encode_example(features)
    truth = describe_record(payload)
    assert truth is not None
    found = _walk(payload)
    assert list(found.features) == list(truth)
    for key, (kind, values) in truth.items():
        assert found.counts[key] == len(values)
        walked = found.features[key][1]
        if kind == "bytes":
            assert [v[:256] for v in values] == walked and [len(v) for v in values] == [
                w.size for w in walked
            ]
            for item, value in enumerate(values):
                at = find_value(lambda o, s: payload[o : o + s], len(payload), key, item)
                assert at is not None and payload[at[0] : at[0] + at[1]] == value
        else:
            assert values == walked


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**32))
def test_the_walker_refuses_what_protobuf_refuses(noise: bytes, seed: int) -> None:
    """Property: any bytes (random, or an Example damaged and cut) are described or refused with
    WireError, as protobuf accepts or refuses them."""
    rng = random.Random(seed)
    example = bytearray(encode_example({"a": [1, 2], "b": [b"xy" * 50], "c": FloatList([0.5])}))
    for _ in range(rng.randrange(4)):
        example[rng.randrange(len(example))] = rng.randrange(256)
    for payload in (noise, bytes(example[: rng.randrange(len(example) + 1)])):
        accepted = describe_record(payload) is not None
        try:
            _walk(payload)
        except WireError:
            assert not accepted, payload
        else:
            assert accepted or describe_feature_lists(payload) is None, payload


def _ld(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize(
    ("kind_field", "values", "expected"),
    [
        (1, bytes([0x08, 0x02]) + b"xy" + _ld(1, b""), ("bytes", [b""])),  # found by fuzz_wire in CI
        (1, bytes([0x0D]) + b"abcd" + _ld(1, b"hi"), ("bytes", [b"hi"])),
        (2, bytes([0x08, 0x05]) + _ld(1, bytes([0, 0, 0x80, 0x3F])), ("float", [1.0])),
        (2, bytes([0x09]) + bytes(8), ("float", [])),
        (3, bytes([0x0D]) + bytes([1, 0, 0, 0]) + bytes([0x08, 0x07]), ("int64", [7])),
        (3, bytes([0x09]) + bytes(8), ("int64", [])),
    ],
    ids=["bytes+varint", "bytes+fixed32", "float+varint", "float+fixed64", "int64+fixed32", "int64+fixed64"],
)
def test_a_list_value_of_another_wire_type_is_an_unknown_field(
    kind_field: int, values: bytes, expected: tuple[str, list[Any]]
) -> None:
    """A value list whose field 1 comes with another wire type (a bytes value as a varint, an
    int64 as fixed32...): protobuf keeps it aside as an unknown field and reads the rest; the
    walker did refuse the record."""
    payload = _ld(1, _ld(1, _ld(1, b"f") + _ld(2, _ld(kind_field, values))))
    assert describe_record(payload) == {"f": expected}
    found = _walk(payload)
    assert found.features == {"f": expected} and found.counts == {"f": len(expected[1])}


def _bytes_list(*values: bytes) -> bytes:
    return _ld(1, b"".join(_ld(1, value) for value in values))


@pytest.mark.parametrize(
    ("feature", "expected"),
    [
        ([_bytes_list(b"xy"), _ld(1, b"")], ("bytes", [b"xy"])),  # found by fuzz_wire in CI
        ([_bytes_list(b"x"), _bytes_list(b"y", b"z")], ("bytes", [b"x", b"y", b"z"])),
        ([_bytes_list(b"x"), _ld(3, _ld(1, bytes([5]))), _bytes_list(b"y")], ("bytes", [b"y"])),
        ([_bytes_list(b"x"), bytes([0x18, 0x01]), _bytes_list(b"y")], ("bytes", [b"x", b"y"])),
        ([_ld(3, _ld(1, bytes([5]))), _ld(3, _ld(1, bytes([6, 7])))], ("int64", [5, 6, 7])),
    ],
)
@pytest.mark.parametrize("split", [False, True])
def test_a_feature_met_in_pieces_is_merged_as_protobuf_merges_it(
    feature: list[bytes], expected: tuple[str, list[Any]], split: bool
) -> None:
    """The same list set twice in a Feature is one list (protobuf merges a message field met
    again); another list between clears it (a oneof); a list field of another wire type is an
    unknown field. The walker kept only the last list. ``split``: the map entry holds its Feature
    in pieces, one a value field, which protobuf merges too."""
    values = [_ld(2, piece) for piece in feature] if split else [_ld(2, b"".join(feature))]
    payload = _ld(1, _ld(1, _ld(1, b"f") + b"".join(values)))
    assert describe_record(payload) == {"f": expected}
    found = _walk(payload)
    assert found.features == {"f": expected} and found.counts == {"f": len(expected[1])}
    if expected[0] == "bytes":
        for item, value in enumerate(expected[1]):
            at = find_value(lambda o, n: payload[o : o + n], len(payload), "f", item)
            assert at is not None and payload[at[0] : at[0] + at[1]] == value
        assert find_value(lambda o, n: payload[o : o + n], len(payload), "f", len(expected[1])) is None


def test_counts_past_what_is_kept() -> None:
    payload = encode_example({"ids": list(range(3000)), "names": [b"n"] * 3000})
    found = _walk(payload, keep=10)
    assert found.counts == {"ids": 3000, "names": 3000}
    assert found.features["ids"][1] == list(range(10)) and len(found.features["names"][1]) == 10


# ------------------------------------------------------------------ the server


@contextlib.contextmanager
def _serving(catalog: Catalog) -> Iterator[str]:
    server = make_server(catalog)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return _write(tmp_path / "small.tfrecord", [encode_example({"label": [i]}) for i in range(5)])


def test_requests_from_other_sites_are_refused(small: Path) -> None:
    with _serving(Catalog([str(small)])) as url:
        port = url.split(":")[2].split("/")[0]
        api = url + "api/records?file=0"
        assert _status(api) == 200
        assert _status(api, {"Sec-Fetch-Site": "same-origin"}) == 200
        assert _status(api, {"Sec-Fetch-Site": "none"}) == 200  # typed in the address bar
        assert _status(api, {"Origin": f"http://127.0.0.1:{port}"}) == 200
        for headers in (
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},  # another port of 127.0.0.1
            {"Origin": "http://evil.example"},
            {"Origin": "http://127.0.0.1:1"},
            {"Origin": "null"},
        ):
            assert _status(api, headers) == 403, headers
            assert _status(url + "api/verify?file=0", headers) == 403, headers
        # the page itself may be opened from a link elsewhere: it is static
        assert _status(url, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}) == 200


def _server_threads() -> int:
    return sum("process_request_thread" in thread.name for thread in threading.enumerate())


def test_connections_and_their_threads_are_capped(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: 200 unfinished requests held 202 threads."""
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 8)
    before = _server_threads()
    with _serving(Catalog([str(small)])) as url:
        port = int(url.split(":")[2].split("/")[0])
        sockets = []
        try:
            for _ in range(50):
                client = socket.create_connection(("127.0.0.1", port), timeout=30)
                client.sendall(b"GET /api/files HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
                sockets.append(client)
            deadline = time.monotonic() + 30
            while _server_threads() - before < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _server_threads() - before == 8
            sockets[-1].settimeout(30)
            assert sockets[-1].recv(1) == b""  # the ones past the cap are closed at once
        finally:
            for client in sockets:
                client.close()
        deadline = time.monotonic() + 30
        while _server_threads() > before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _status(url + "api/files") == 200


def test_ctrl_c_while_a_connections_thread_starts_stops_the_server(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt raised in ``Thread.start()`` after the connection's thread began (Ctrl-C
    landing there) reaches ``serve_forever`` as itself, and the connection's place is given back
    once. (Given back by both, the semaphore's ValueError replaced it: the server logged the
    ValueError, served on, and Ctrl-C did not stop the viewer; seen once in CI.)"""
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 3)
    server = make_server(Catalog([str(small)]))
    start = threading.Thread.start

    def interrupted(thread: threading.Thread) -> None:
        start(thread)
        thread.join(30)  # the connection served, its place given back by its thread
        raise KeyboardInterrupt

    ours, theirs = socket.socketpair()
    try:
        theirs.close()  # the connection ends at once
        monkeypatch.setattr(threading.Thread, "start", interrupted)
        with pytest.raises(KeyboardInterrupt):
            server.process_request(ours, ("127.0.0.1", 0))
        monkeypatch.setattr(threading.Thread, "start", start)
        places = server._connections  # every place free again, and none given back twice
        assert [places.acquire(blocking=False) for _ in range(4)] == [True, True, True, False]
    finally:
        ours.close()
        server.server_close()


def test_an_idle_connection_is_let_go(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module._Handler, "timeout", 0.2)
    with _serving(Catalog([str(small)])) as url:
        port = int(url.split(":")[2].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            client.sendall(b"GET /api/files HTTP/1.1\r\n")  # then nothing
            assert client.recv(1) == b""  # closed by the server, not by this 30 s timeout


class _Slow(Catalog):
    """A catalog whose pages wait until released (a slow disk, or a large page)."""

    release = threading.Event()
    started = threading.Semaphore(0)

    def records(self, file: int, start: int, count: int) -> dict[str, Any]:
        self.started.release()
        assert self.release.wait(30)
        return super().records(file, start, count)


def test_requests_that_read_records_wait_their_turn(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "HEAVY_AT_ONCE", 2)
    monkeypatch.setattr(server_module, "_HEAVY_WAIT", 0.3)
    with _serving(_Slow([str(small)])) as url:
        statuses: list[int] = []
        first = [
            threading.Thread(target=lambda: statuses.append(_status(url + "api/records?file=0")))
            for _ in range(2)
        ]
        for thread in first:
            thread.start()
        for _ in range(2):
            assert _Slow.started.acquire(timeout=30)
        assert _status(url + "api/records?file=0") == 503  # a third waits its turn, then is told
        assert _status(url + "api/files") == 200  # the light ones are not held up
        _Slow.release.set()
        for thread in first:
            thread.join(30)
        assert statuses == [200, 200]


def test_parameters_are_bounded(small: Path) -> None:
    with _serving(Catalog([str(small)])) as url:
        assert _status(url + "api/records?file=0&start=" + "9" * 5000) == 400
        assert (
            _status(url + "api/search?q=" + "+" * 30_000) == 400
        )  # 30,000 spaces: the filter issue 44 timed
        answer = urllib.request.urlopen(url + "api/search?q=label", timeout=30)
        assert json.loads(answer.read())["scanned"] == 5
