"""Real storage servers on 127.0.0.1 for the remote-storage tests and benchmarks.

- :func:`moto_server`: an S3-compatible server (``moto[server]``), in a child process.
- :func:`gcs_emulator`: a GCS emulator (``gcp-storage-emulator``), in a child process.
- :class:`FaultProxy`: an HTTP proxy in front of either that counts requests and, when told,
  answers some of them with a 503 or drops the connection without an answer, never answers,
  answers slowly, resets or cuts short a body, or answers every GET 503 for a while (a storm);
  it logs every GET (:attr:`FaultProxy.log`).
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
import select
import socket
import struct
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
    Faults of object GETs (no query string: not listings), each every n-th such GET (0: never):
    ``hang_every`` never answered (the connection is held open until the client lets go, the
    proxy stops or ``hold`` seconds pass); ``slow_every`` answered at ``slow_rate`` bytes/s;
    ``reset_every`` half the body sent, then the connection reset; ``short_every`` half the body
    sent under the whole body's Content-Length, then the connection closed. A request is faulted
    at most once (by its path and range): its retry or hedge gets through. :meth:`storm`
    answers every object GET 503 SlowDown for some seconds from the next one.
    ``get_bytes`` counts the body bytes of the GETs the server answered (``get_bytes_by_path``
    by URL path, query left out; JSON metadata and listings left out): what a reader fetched.
    ``log`` has one entry per GET: ``(start, seconds, path, range, outcome)``, the outcome the
    status sent or the fault (``"hung"``, ``"slow"``, ``"reset"``, ``"short"``, ``"drop"``) and
    whether the client went away first (``", client gone"``) or the proxy stopped first (``", proxy
    stopped"``: a slow or held answer still under way when the test left the proxy's ``with``).
    ``GET /__counts__`` is answered by the proxy itself with
    the counts as JSON (for readers in other processes). ``backlog``: the listening socket's.
    """

    def __init__(
        self,
        upstream: str,
        *,
        fail_every: int = 0,
        deny: bool = False,
        latency: float = 0.0,
        hang_every: int = 0,
        slow_every: int = 0,
        slow_rate: float = 10_000.0,
        reset_every: int = 0,
        short_every: int = 0,
        hold: float = 60.0,
        backlog: int = 5,
    ) -> None:
        self.hang_every, self.slow_every, self.slow_rate = hang_every, slow_every, slow_rate
        self.reset_every, self.short_every, self.hold = reset_every, short_every, hold
        self.log: list[tuple[float, float, str, str, str]] = []
        self.object_gets = 0
        self._storm_until = self._storm_for = 0.0
        self._faulted: set[str] = set()
        self._stopping = threading.Event()
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
                        elif "?" not in self.path and self.path != "/":
                            fault = proxy._object_fault(f"{self.path} {self.headers.get('Range', '')}")
                started = time.monotonic()
                try:
                    outcome = self._answer(fault, body)
                except OSError as error:  # the client went away
                    outcome = f"{fault or 'forwarded'}, client gone ({type(error).__name__})"
                if self.command == "GET":
                    with proxy._lock:
                        proxy.log.append(
                            (
                                started,
                                time.monotonic() - started,
                                self.path,
                                self.headers.get("Range", ""),
                                outcome,
                            )
                        )

            def _answer(self, fault: str | None, body: bytes | None) -> str:
                if proxy.latency:
                    time.sleep(proxy.latency)
                if fault == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return "drop"
                if fault == "hung":
                    return self._hold()
                if fault in ("503", "403", "storm"):
                    fault = "503" if fault == "storm" else fault
                    payload = _SLOW_DOWN if fault == "503" else _DENIED
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return fault
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
                if self.command == "HEAD":
                    return str(answer.status)
                if fault in ("reset", "short"):
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    if fault == "reset":  # SO_LINGER 0: the close sends a RST, not a FIN
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    else:
                        self.connection.shutdown(socket.SHUT_WR)
                    return fault
                if fault == "slow":
                    step = max(1, int(proxy.slow_rate / 20))
                    for at in range(0, len(data), step):
                        if proxy._stopping.wait(step / proxy.slow_rate):
                            return "slow, proxy stopped"
                        self.wfile.write(data[at : at + step])
                        self.wfile.flush()
                    return "slow"
                self.wfile.write(data)
                return str(answer.status)

            def _hold(self) -> str:
                """No answer: waits until the client closes the connection (or the proxy stops)."""
                self.close_connection = True
                until = time.monotonic() + proxy.hold
                while time.monotonic() < until and not proxy._stopping.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable:
                        try:
                            if not self.connection.recv(1, socket.MSG_PEEK):
                                return "hung, client gone"
                        except OSError:
                            return "hung, client gone"
                        return "hung, client sent more"
                return "hung, proxy stopped" if proxy._stopping.is_set() else "hung"

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        server_class = type("Server", (http.server.ThreadingHTTPServer,), {"request_queue_size": backlog})
        self._server = server_class(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _object_fault(self, request: str) -> str | None:
        """The fault of the next object GET, if any (call it holding the lock)."""
        self.object_gets += 1
        if self._storm_for:
            self._storm_until, self._storm_for = time.monotonic() + self._storm_for, 0.0
        if time.monotonic() < self._storm_until:
            self.faults += 1
            return "storm"
        if request in self._faulted:
            return None
        for name, every in (
            ("hung", self.hang_every),
            ("slow", self.slow_every),
            ("reset", self.reset_every),
            ("short", self.short_every),
        ):
            if every and self.object_gets % every == 0:
                self.faults += 1
                self._faulted.add(request)
                return name
        return None

    def storm(self, seconds: float) -> None:
        """Answers every object GET with 503 SlowDown for ``seconds`` from the next one on."""
        with self._lock:
            self._storm_for = seconds

    def outcomes(self) -> dict[str, int]:
        """The logged GETs by outcome."""
        found: dict[str, int] = {}
        with self._lock:
            for entry in self.log:
                found[entry[4]] = found.get(entry[4], 0) + 1
        return found

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
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
            self.object_gets = 0
            self.log.clear()
            self._faulted.clear()


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
