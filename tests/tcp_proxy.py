"""A TCP proxy a test can cut and restore: a broker that goes away and comes back, in front of
the real one (no private node to stop and start).

`TcpProxy(target_port)` listens on 127.0.0.1:`port` (a free one unless given) once `start()`ed
and copies bytes both ways to 127.0.0.1:`target_port` in threads. `cut()` closes the listening
socket and every connection (clients see their connection reset, and new ones refused);
`start()` listens on the same port again. Port reserved but not started: nothing listens there.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from amqp_node import free_port


class TcpProxy:
    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0
        """Connections accepted so far."""

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "") -> str:
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/{vhost}"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accepting, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            # shutdown wakes the threads blocked reading it (close alone would not) and ends
            # the connection for the peer at once
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    close = cut

    def _accepting(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets |= {client, upstream}
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
