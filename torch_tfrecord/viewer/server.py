"""The viewer's HTTP server: the standard library's ``ThreadingHTTPServer``, serving the page's
bundled assets and a small JSON API over a :class:`~torch_tfrecord.viewer.catalog.Catalog`.

The catalog may be made on a thread while the server already listens (``make_server`` given a
function): the page's assets are served meanwhile, and its questions wait for the catalog.

On 127.0.0.1 it answers only requests addressed to 127.0.0.1 or localhost (a web page elsewhere
cannot reach it through DNS rebinding); on any other address every request must carry the token
the server printed (``?token=``), compared in constant time. Its API answers only its own page:
a request a browser marks as coming from another site (``Sec-Fetch-Site``) or origin
(``Origin``) is refused, so a web page that guesses the port cannot start work here.

Bounded whatever a client does: at most :data:`MAX_CONNECTIONS` connections (one thread each;
more are closed at once), each idle at most :data:`SOCKET_TIMEOUT` seconds, at most
:data:`HEAVY_AT_ONCE` requests that read records at a time (each within the catalog's byte budget
per page), and parameters of bounded length.
"""

from __future__ import annotations

import hmac
import http.server
import json
import logging
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..errors import TFRecordError

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = ["ViewerServer", "make_server"]

logger = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
_SECURITY_HEADERS = {
    # The page loads nothing from elsewhere: the browser refuses it too.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


# The background work that competes for the CPU (local index loads and builds, verification)
# starts once the server has answered a first request and then had none in flight for this long
# (the first page and its images are served), or this long after the first request at the
# latest; a page that needs an index starts it at once.
QUIET_SECONDS = 0.3
LATEST_SECONDS = 3.0

MAX_CONNECTIONS = 64
SOCKET_TIMEOUT = 30.0
HEAVY_AT_ONCE = 4
# A request that reads records waits this long for its turn, then is answered 503.
_HEAVY_WAIT = 60.0
_HEAVY = frozenset(["/api/records", "/api/search", "/api/selection", "/api/blob", "/api/mask", "/api/schema"])
# Requests a browser sends for the page itself, from this server's own origin, or typed in.
_OWN_SITE = frozenset(["same-origin", "none"])
_MAX_PARAMETER = 4096  # characters of a parameter's value


class _Slot:
    """One connection's place among :data:`MAX_CONNECTIONS`, given back at most once."""

    __slots__ = ("_lock", "_semaphore")

    def __init__(self, semaphore: threading.BoundedSemaphore) -> None:
        self._semaphore: threading.BoundedSemaphore | None = semaphore
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            semaphore, self._semaphore = self._semaphore, None
        if semaphore is not None:
            semaphore.release()


class ViewerServer(http.server.ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its catalog and its token (None: none needed)."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], catalog: Catalog | Callable[[], Catalog], token: str | None
    ) -> None:
        super().__init__(address, _Handler)
        self.token = token
        # read now: the page's assets are served while the catalog's imports hold the interpreter
        static = resources.files(__package__).joinpath("static")
        self.assets = {
            path: (static.joinpath(name).read_bytes(), kind) for path, (name, kind) in _ASSETS.items()
        }
        self._catalog: Catalog | None = None
        self._catalog_error: BaseException | None = None
        self._catalog_ready = threading.Event()
        if callable(catalog):
            threading.Thread(target=self._make_catalog, args=(catalog,), name="catalog", daemon=True).start()
        else:
            self._catalog = catalog
            self._catalog_ready.set()
        self._activity = threading.Condition()
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._slots: dict[int, _Slot] = {}  # each open connection's place, by its socket's id
        self.heavy = threading.BoundedSemaphore(HEAVY_AT_ONCE)
        self._in_flight = 0
        self._first: float | None = None  # when the first request came
        self._last = 0.0  # when the last request was answered

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, or closed at once past :data:`MAX_CONNECTIONS`."""
        if not self._connections.acquire(blocking=False):
            logger.debug("closing a connection from %s: %d open already", client_address, MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        # The connection's place is given back once: by its thread, or here if no thread ran it.
        # (Ctrl-C can land inside Thread.start() after the thread began: released by both, the
        # semaphore's ValueError replaced the KeyboardInterrupt, the server logged it and served on.)
        slot = self._slots[id(request)] = _Slot(self._connections)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.pop(id(request), None)
            slot.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        slot = self._slots.pop(id(request), None)
        try:
            super().process_request_thread(request, client_address)
        finally:
            if slot is not None:
                slot.release()

    def _make_catalog(self, make: Callable[[], Catalog]) -> None:
        try:
            self._catalog = make()
        except BaseException as error:  # handed to the page's questions and to catalog_failure()
            self._catalog_error = error
            self.shutdown_request_loop()
        finally:
            self._catalog_ready.set()

    def shutdown_request_loop(self) -> None:
        """Ends :meth:`serve_forever` from another thread (without waiting for it)."""
        threading.Thread(target=self.shutdown, name="shutdown", daemon=True).start()

    @property
    def catalog(self) -> Catalog:
        """The catalog, once made (the error that stopped it from being made is raised)."""
        self._catalog_ready.wait()
        if self._catalog is None:
            raise self._catalog_error or RuntimeError("no catalog")
        return self._catalog

    def catalog_failure(self) -> BaseException | None:
        """The error that stopped the catalog from being made, if one did."""
        return self._catalog_error

    def close_catalog(self) -> None:
        """Closes the catalog's files, if it was made."""
        if self._catalog is not None:
            self._catalog.close()

    def request_began(self) -> None:
        with self._activity:
            self._in_flight += 1
            if self._first is None:
                self._first = time.monotonic()
                self._activity.notify_all()

    def request_ended(self) -> None:
        with self._activity:
            self._in_flight -= 1
            self._last = time.monotonic()
            self._activity.notify_all()

    def allow_work_when_quiet(self) -> threading.Thread:
        """Lets the catalog's index loads, builds and verifications begin
        (:meth:`.catalog.Catalog.allow_work`) once the first page is served, watching from a
        daemon thread: the first page never shares the CPU with an index build."""

        def wait_then_start() -> None:
            with self._activity:
                while self._first is None:
                    self._activity.wait()
                while True:
                    now = time.monotonic()
                    quiet = self._in_flight == 0 and now - self._last >= QUIET_SECONDS
                    if quiet or now - self._first >= LATEST_SECONDS:
                        break
                    self._activity.wait(QUIET_SECONDS / 3)
            self._catalog_ready.wait()
            if self._catalog is not None:
                self._catalog.allow_work()

        thread = threading.Thread(target=wait_then_start, name="allow background work", daemon=True)
        thread.start()
        return thread

    @property
    def url(self) -> str:
        """The page's address, with the token when one is needed."""
        host, port = str(self.server_address[0]), int(self.server_address[1])
        shown = LOCALHOST if host in ("0.0.0.0", "::") else host
        query = f"?token={self.token}" if self.token else ""
        return f"http://{shown}:{port}/{query}"


def make_server(
    catalog: Catalog | Callable[[], Catalog], host: str = LOCALHOST, port: int = 0
) -> ViewerServer:
    """A server for ``catalog`` on ``host`` and ``port`` (0: a free one); off 127.0.0.1 it needs a
    fresh random token, in :attr:`ViewerServer.url`.

    ``catalog`` may be a function that makes it, called on a daemon thread: the server listens
    and serves the page's assets at once, its questions wait for the catalog; should making it
    fail, :meth:`~ViewerServer.serve_forever` returns and ``catalog_failure()`` says why."""
    token = None if host == LOCALHOST else secrets.token_urlsafe(24)
    return ViewerServer((host, port), catalog, token)


def _int(query: dict[str, list[str]], name: str, default: int | None = None) -> int:
    values = query.get(name)
    if not values:
        if default is None:
            raise _BadRequest(f"missing parameter {name!r}")
        return default
    try:
        if len(values[0]) > 20:  # (int() of a long text takes quadratic time)
            raise ValueError
        return int(values[0])
    except ValueError:
        raise _BadRequest(f"parameter {name}={values[0][:40]!r} is not an integer") from None


def _text(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name)
    if not values:
        raise _BadRequest(f"missing parameter {name!r}")
    if len(values[0]) > _MAX_PARAMETER:
        raise _BadRequest(f"parameter {name!r} is longer than {_MAX_PARAMETER} characters")
    return values[0]


class _Busy(Exception):
    pass


class _BadRequest(Exception):
    pass


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT  # (the socket's: an idle or slow client lets go of its thread)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        for name, value in _SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, document: Any) -> None:
        self._send(status, json.dumps(document, allow_nan=False).encode(), "application/json")

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        token = self.server.token
        if token is not None:
            given = (query.get("token") or [""])[0]
            return hmac.compare_digest(given.encode(), token.encode())
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        return host in (LOCALHOST, "localhost")

    def _elsewhere(self) -> str | None:
        """Why the request comes from another site or origin than this server's page, if it does."""
        site = self.headers.get("Sec-Fetch-Site")
        if site is not None and site not in _OWN_SITE:
            return f"Sec-Fetch-Site: {site[:40]}"
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{self.headers.get('Host')}":
            return f"Origin: {origin[:80]}"
        return None

    def do_GET(self) -> None:
        self.server.request_began()
        try:
            self._answer()
        finally:
            self.server.request_ended()

    def _answer(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if not self._allowed(query):
            self._json(403, {"error": "this viewer needs the token it printed: open the URL it gave"})
            return
        elsewhere = self._elsewhere() if url.path not in self.server.assets else None
        if elsewhere is not None:  # a page of another site: it may not make the viewer work
            self._json(
                403, {"error": f"the viewer answers only its own page, not another site's ({elsewhere})"}
            )
            return
        try:
            if url.path in _HEAVY:
                self._heavy(url.path, query)
            else:
                self._route(url.path, query)
        except _Busy:
            self._json(503, {"error": f"the viewer is busy with {HEAVY_AT_ONCE} requests: try again"})
        except _BadRequest as error:
            self._json(400, {"error": str(error)})
        except LookupError as error:
            self._json(404, {"error": str(error).strip("'\"")})
        except (TFRecordError, ValueError, OSError, ImportError) as error:
            self._json(422, {"error": f"{type(error).__name__}: {error}"})

    def _heavy(self, path: str, query: dict[str, list[str]]) -> None:
        """A request that reads records: one of at most :data:`HEAVY_AT_ONCE` at a time."""
        if not self.server.heavy.acquire(timeout=_HEAVY_WAIT):
            raise _Busy
        try:
            self._route(path, query)
        finally:
            self.server.heavy.release()

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        if path in self.server.assets:  # served before the catalog is made
            self._send(200, *self.server.assets[path])
            return
        catalog = self.server.catalog
        if path == "/api/files":
            self._json(200, catalog.files())
        elif path == "/api/records":
            page = catalog.records(_int(query, "file", 0), _int(query, "start", 0), _int(query, "count", 20))
            self._json(200, page)
        elif path == "/api/locate":
            self._json(200, catalog.locate(_int(query, "file", 0), _int(query, "offset")))
        elif path == "/api/blob":
            args = (_int(query, "file"), _int(query, "record"), _text(query, "key"), _int(query, "item", 0))
            body, content_type = catalog.blob(*args)
            self._send(200, body, content_type)
        elif path == "/api/mask":
            self._send(200, catalog.mask(_int(query, "file"), _int(query, "record")), "image/png")
        elif path == "/api/index":
            catalog.shard(_int(query, "file")).build()
            self._json(200, catalog.files())
        elif path == "/api/verify":
            catalog.shard(_int(query, "file")).verify()
            self._json(200, catalog.files())
        elif path == "/api/schema":
            self._json(200, catalog.schema())
        elif path == "/api/statistics":
            self._json(200, catalog.statistics())
        elif path == "/api/search":
            found = catalog.search(_text(query, "q"), _int(query, "file", 0), _int(query, "start", 0))
            self._json(200, found)
        elif path == "/api/selection":  # the filter's matches in every file, as a selection file
            from ..data.select.select_records import select_as_shown

            chosen = select_as_shown(catalog.paths, _text(query, "q"), catalog.storage_options)
            disposition = {"Content-Disposition": 'attachment; filename="selection.ttsel"'}
            self._send(200, chosen.to_bytes(), "application/octet-stream", disposition)
        else:
            self._json(404, {"error": f"nothing at {path!r}"})
