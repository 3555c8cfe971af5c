"""The `/metrics` listener: prometheus_client's exposition, served from threads with bounds.

prometheus_client's own `start_http_server` gives every connection a thread that waits for its
request for ever, with no cap: a few thousand idle connections (anyone on the listener may open
them; `/metrics` has no authentication) held thousands of threads in the gateway's process and
starved its event loop, so gRPC calls timed out. Here a connection that has not sent its request
within `REQUEST_TIMEOUT_S`, or is idle that long between requests, is closed, and at most
`MAX_CONNECTIONS` are served at once; more are closed as they arrive (a scraper retries at its
next interval).
"""

from __future__ import annotations

import socket
import ssl
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

MAX_CONNECTIONS = 32
"""Connections served at once (a scrape takes milliseconds)."""
REQUEST_TIMEOUT_S = 10.0
"""Longest wait for a connection's request, and for each read of it."""


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S  # the socket's timeout: a silent client is dropped

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

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
    `--tls-cert` context) from a daemon thread; the server and the port it listens on."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]

    class Server(_Server):
        address_family = family

    server = make_server(str(address[0]), port, make_wsgi_app(registry), Server,
                         handler_class=_Handler)
    if tls is not None:
        # The handshake happens on the connection's first read, in its own thread and under
        # its timeout, not in the accepting thread (where one silent client would stop all).
        server.socket = tls.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server, int(server.server_address[1])
