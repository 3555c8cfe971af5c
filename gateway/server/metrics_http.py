"""The `/metrics` listener: prometheus_client's exposition, served from threads with bounds.

prometheus_client's own `start_http_server` gives every connection a thread that waits for its
request for ever, with no cap: a few thousand idle connections (anyone on the listener may open
them; `/metrics` has no authentication) held thousands of threads in the gateway's process and
starved its event loop, so gRPC calls timed out. Here a connection that has not sent its request
within `REQUEST_TIMEOUT_S`, or is idle that long between requests, is closed, and at most
`MAX_CONNECTIONS` are served at once; more are closed as they arrive (a scraper retries at its
next interval). A request must be whole within `REQUEST_TIMEOUT_S` of the connection however
slowly it trickles in.

Only `/metrics` is served (prometheus_client's app answers every path with the metrics): any
other path is 404. GET and HEAD (the headers of a GET, no body) are served, OPTIONS lists them,
any other method is 405.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

MAX_CONNECTIONS = 32
"""Connections served at once (a scrape takes milliseconds)."""
REQUEST_TIMEOUT_S = 10.0
"""Longest wait for a connection's request, and for each read of it."""
EXPIRY_CHECK_S = 0.5
"""How often connections past their deadline are looked for."""
METRICS_PATH = "/metrics"
"""The one path served (the README's); any other is 404."""
ALLOWED = "GET, HEAD, OPTIONS"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def only_metrics(app: WsgiApp) -> WsgiApp:
    """`app` (prometheus_client's, which serves the metrics on any path and refuses HEAD)
    at `METRICS_PATH` only, for GET and HEAD."""

    def served(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        if environ.get("PATH_INFO", "") != METRICS_PATH:
            return _plain(start_response, "404 Not Found",
                          f"not found: metrics are at {METRICS_PATH}\n", method)
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", ALLOWED), ("Content-Length", "0")])
            return [b""]
        if method not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed",
                          f"method {method} not allowed: use GET or HEAD\n", method,
                          [("Allow", ALLOWED)])
        if method == "GET":
            return app(environ, start_response)
        kept: list[Any] = []
        body = b"".join(app({**environ, "REQUEST_METHOD": "GET"},
                            lambda status, headers, exc_info=None: kept.extend((status, headers))))
        headers = [(k, v) for k, v in kept[1] if k.lower() != "content-length"]
        start_response(kept[0], [*headers, ("Content-Length", str(len(body)))])
        return [b""]  # HEAD: the headers of the GET, no body

    return served


def _plain(start_response: Callable[..., Any], status: str, text: str, method: str,
           extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))), *(extra or [])])
    return [b"" if method == "HEAD" else body]


class _Handler(WSGIRequestHandler):
    """One request per connection. The socket's timeout drops a silent client; the server's
    watch drops one whose request (line and headers) is not whole `REQUEST_TIMEOUT_S` after
    it connected, however it trickles in: a client sending a byte every few seconds held its
    slot for ever (`MAX_CONNECTIONS` of them and no scrape got through)."""

    timeout = REQUEST_TIMEOUT_S  # the socket's timeout: a silent client is dropped
    server: _Server

    def handle(self) -> None:
        self.server.watch(self.connection)
        try:
            super().handle()
        finally:
            self.server.unwatch(self.connection)

    def parse_request(self) -> bool:
        self.server.unwatch(self.connection)  # the request is whole: the rest is ours
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128
    """The listen backlog (socketserver's default is 5): connections arriving together while
    the accepting thread waits for the interpreter lock had their SYNs dropped and came seconds
    later, after the kernel's retransmissions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._deadlines: dict[socket.socket, float] = {}
        """Connections whose request is not whole yet, with the time it must be by."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(*args, **kwargs)
        threading.Thread(target=self._expire, name="metrics-http-deadlines",
                         daemon=True).start()

    def watch(self, connection: socket.socket) -> None:
        with self._lock:
            self._deadlines[connection] = time.monotonic() + REQUEST_TIMEOUT_S

    def unwatch(self, connection: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(connection, None)

    def _expire(self) -> None:
        """Shut the connections past their deadline (the thread reading each request sees
        its end and returns); one thread for all, until the server closes."""
        while not self._closed.wait(EXPIRY_CHECK_S):
            now = time.monotonic()
            with self._lock:
                due = [c for c, at in self._deadlines.items() if at <= now]
                for connection in due:
                    del self._deadlines[connection]
            for connection in due:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed at once, no thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or went away: nothing to report (the base prints a
        traceback to stderr)."""


def serve_metrics(host: str, port: int, registry: Collector,
                  tls: ssl.SSLContext | None = None) -> tuple[WSGIServer, int]:
    """Serve `registry` at `http://host:port/metrics` (`https` with `tls`, the gateway's
    `--tls-cert` context) from a daemon thread; the server and the port it listens on. Other
    paths are 404, methods other than GET, HEAD and OPTIONS 405."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]

    class Server(_Server):
        address_family = family

    server = make_server(str(address[0]), port, only_metrics(make_wsgi_app(registry)), Server,
                         handler_class=_Handler)
    if tls is not None:
        # The handshake happens on the connection's first read, in its own thread and under
        # its timeout, not in the accepting thread (where one silent client would stop all).
        server.socket = tls.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server, int(server.server_address[1])
