"""A 127.0.0.1 server that sends its headers at once, then its body a byte at a time, each
byte well inside the client's read timeout: the answer never ends, no read ever times out.
For the whole-call limits (``autoscaler/bounded.py``)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Trickle:
    """Counts the requests it got; stops sending when ``stop`` is set."""

    def __init__(self, every: float, silent: bool = False) -> None:
        self.every, self.silent, self.requests = every, silent, 0
        self.stop = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.threads: list[threading.Thread] = []
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed: the test is over
                return
            self.requests += 1
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            if self.silent:  # not even headers: a handshake that never ends
                self.stop.wait()
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            while not self.stop.wait(self.every):
                conn.sendall(b" ")


@contextlib.contextmanager
def trickling(every: float = 0.2, silent: bool = False) -> Iterator[Trickle]:
    """A running :class:`Trickle`, stopped (and its threads joined) on the way out;
    ``silent``: it accepts, reads the request and never answers."""
    t = Trickle(every, silent)
    accepting = threading.Thread(target=t.serve, daemon=True)
    accepting.start()
    try:
        yield t
    finally:
        t.stop.set()
        t.server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        t.server.close()
        for thread in [accepting, *t.threads]:
            thread.join(timeout=5)

