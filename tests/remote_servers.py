"""Real storage servers on 127.0.0.1 for the remote-storage tests and benchmarks.

- :func:`moto_server`: an S3-compatible server (``moto[server]``), in a child process.
- :func:`gcs_emulator`: a GCS emulator (``gcp-storage-emulator``), in a child process.
- :class:`FaultProxy`: an HTTP proxy in front of either that counts requests and, when told,
  answers some of them with a 503 or drops the connection without an answer.
- :class:`RangedFileServer`: a folder's files over plain HTTP (ranged GETs, HEADs), with a
  latency added to every request and the requests counted.

Each server is started on a free port, waited for, and stopped by its PID.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["FaultProxy", "RangedFileServer", "free_port", "gcs_emulator", "moto_server", "s3_options"]

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
_SLOW_DOWN = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
_DENIED = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, process: subprocess.Popen[bytes], name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout}s")


@contextlib.contextmanager
def _server(command: list[str], port: int, name: str, env: dict[str, str] | None = None) -> Iterator[int]:
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        _wait_for(port, process, name)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """An S3-compatible server on 127.0.0.1; yields its endpoint URL."""
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _server(command, port, "moto_server"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def gcs_emulator() -> Iterator[str]:
    """A GCS emulator on 127.0.0.1 (in memory); yields its endpoint URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gcp_storage_emulator",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--in-memory",
        "--quiet",
    ]
    with _server(command, port, "gcp-storage-emulator"):
        yield f"http://127.0.0.1:{port}"


def s3_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """s3fs storage options for a local endpoint (moto accepts any credentials)."""
    return {
        "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": endpoint},
        **extra,
    }


class FaultProxy:
    """An HTTP proxy to ``upstream`` on 127.0.0.1 that counts requests and injects faults.

    ``fail_every=n`` makes every n-th GET fail, alternately with a 503 SlowDown answer and by
    closing the connection without an answer; ``fail_every=0`` forwards everything.
    ``deny=True`` answers every GET with 403 AccessDenied. ``latency`` seconds are added to every
    request (object stores answer in tens of milliseconds; a local server in well under one).
    ``get_bytes`` counts the body bytes of the GETs the server answered (``get_bytes_by_path``
    by URL path, query left out; JSON metadata and listings left out): what a reader fetched.
    ``GET /__counts__`` is answered by the proxy itself with those counts as JSON (for readers in
    other processes).
    """

    def __init__(
        self, upstream: str, *, fail_every: int = 0, deny: bool = False, latency: float = 0.0
    ) -> None:
        self.latency = latency
        self.upstream = upstream.removeprefix("http://")
        self.fail_every = fail_every
        self.deny = deny
        self.requests: dict[str, int] = {}
        self.ranged_gets = 0
        self.faults = 0
        self.get_bytes = 0
        self.get_bytes_by_path: dict[str, int] = {}
        self._gets = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # (headers and body are two writes: no 40 ms wait between)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                if self.path == "/__counts__":
                    with proxy._lock:
                        counts = {"get_bytes": proxy.get_bytes, "by_path": dict(proxy.get_bytes_by_path)}
                    payload = json.dumps(counts).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.requests[self.command] = proxy.requests.get(self.command, 0) + 1
                    fault = None
                    if self.command == "GET":
                        proxy._gets += 1
                        if "Range" in self.headers:
                            proxy.ranged_gets += 1
                        if proxy.deny:
                            fault = "403"
                        elif proxy.fail_every and proxy._gets % proxy.fail_every == 0:
                            proxy.faults += 1
                            fault = "drop" if proxy.faults % 2 else "503"
                if proxy.latency:
                    time.sleep(proxy.latency)
                if fault == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault in ("503", "403"):
                    payload = _SLOW_DOWN if fault == "503" else _DENIED
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                connection = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    connection.request(self.command, self.path, body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                finally:
                    connection.close()
                self.send_response(answer.status, answer.reason)
                head = self.command == "HEAD"  # its Content-Length is the object's, not this body's
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection") and (
                        head or key.lower() != "content-length"
                    ):
                        self.send_header(key, value)
                metadata = "json" in (answer.getheader("Content-Type") or "")  # (GCS: info, listings)
                if self.command == "GET" and 200 <= answer.status < 300 and not metadata:
                    with proxy._lock:
                        proxy.get_bytes += len(data)
                        key = self.path.partition("?")[0]
                        proxy.get_bytes_by_path[key] = proxy.get_bytes_by_path.get(key, 0) + len(data)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.ranged_gets = 0
            self.faults = 0
            self.get_bytes = 0
            self.get_bytes_by_path.clear()
            self._gets = 0


class RangedFileServer:
    """The files of ``folder`` over HTTP on 127.0.0.1, as a static file host or a bucket's HTTP
    endpoint serves them: GET (whole, or one ``Range: bytes=a-b``), HEAD (size and an ETag of the
    size and modification time); 404 for anything else (no folder listings). ``latency`` seconds
    are added to every request; ``requests`` counts them by method, ``most_at_once`` is the most
    answered at the same time. A context manager: serves
    in threads from ``__enter__`` (``url`` is its root) to ``__exit__``."""

    def __init__(self, folder: str, *, latency: float = 0.0) -> None:
        self.folder = os.path.realpath(folder)
        self.latency = latency
        self.requests: dict[str, int] = {}
        self.most_at_once = 0  # the most requests answered at the same time
        self._at_once = 0
        self._lock = threading.Lock()
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # (headers and body are two writes: no 40 ms wait between)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, body: bool) -> None:
                with served._lock:
                    served.requests[self.command] = served.requests.get(self.command, 0) + 1
                    served._at_once += 1
                    served.most_at_once = max(served.most_at_once, served._at_once)
                try:
                    self._serve(body)
                finally:
                    with served._lock:
                        served._at_once -= 1

            def _serve(self, body: bool) -> None:
                if served.latency:
                    time.sleep(served.latency)
                path = os.path.realpath(os.path.join(served.folder, self.path.split("?")[0].lstrip("/")))
                if not path.startswith(served.folder + os.sep) or not os.path.isfile(path):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = os.stat(path)
                start, stop = 0, status.st_size
                ranged = self.headers.get("Range", "")
                if body and ranged.startswith("bytes="):
                    first, _, last = ranged.removeprefix("bytes=").partition("-")
                    start = int(first) if first else max(0, status.st_size - int(last))
                    stop = min(status.st_size, int(last) + 1) if first and last else status.st_size
                    if start >= stop:
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{status.st_size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                self.send_response(206 if body and ranged else 200)
                self.send_header("Content-Length", str(stop - start))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", f'"{status.st_size:x}-{status.st_mtime_ns:x}"')
                if body and ranged:
                    self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{status.st_size}")
                self.end_headers()
                if body:
                    with open(path, "rb") as handle:
                        handle.seek(start)
                        self.wfile.write(handle.read(stop - start))

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="ranged files", daemon=True)

    def reset(self) -> None:
        with self._lock:
            self.requests, self.most_at_once = {}, 0

    def __enter__(self) -> RangedFileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
