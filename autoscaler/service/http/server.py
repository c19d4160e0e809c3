"""An ``http.server`` that idle or slow clients cannot exhaust.

``ThreadingHTTPServer`` starts one thread per accepted connection, and that thread blocks
reading the request line: 400 half-open connections held 400 threads. Here one thread
accepts connections and watches them with a selector; a connection reaches a worker of a
fixed pool (``workers``) only once the client has sent bytes, so connections that send
nothing hold no thread. The selector keeps at most ``max_pending`` of them (the oldest
is closed first) and closes any that stays silent for ``idle_timeout``; a worker's socket
has ``request_timeout`` for the rest of the request. A client that disconnects or times
out is logged at DEBUG, without a traceback: it is the client's business, not an error.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger(__name__)
CLIENT_GONE = (ConnectionError, TimeoutError, socket.timeout)


class BoundedHTTPServer(HTTPServer):
    """``serve()`` in a thread of your own; ``stop()`` from any other."""

    request_queue_size = 128  # the listen backlog: the accept loop drains it quickly

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 workers: int = 8, max_pending: int = 256, idle_timeout: float = 10.0,
                 request_timeout: float = 10.0):
        handler.timeout = request_timeout  # StreamRequestHandler sets it on the socket
        super().__init__(address, handler)
        self.max_pending, self.idle_timeout = max_pending, idle_timeout
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="http-worker")
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._serving = False
        self._pending: dict[socket.socket, tuple[Any, float]] = {}  # sock -> (addr, since)

    # -- the accept/select loop (one thread) -------------------------------------------
    def serve(self, poll_s: float = 0.2) -> None:
        self._serving = True
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(poll_s):
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    if sock is self.socket:
                        self._accept(sel)
                    else:
                        self._dispatch(sel, sock)
                self._expire(sel, time.monotonic())
        finally:
            for sock in list(self._pending):
                self._drop(sel, sock)
            sel.close()
            self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            sock, addr = self.socket.accept()
        except OSError:  # the client gave up between select and accept
            return
        if len(self._pending) >= self.max_pending:
            self._drop(sel, next(iter(self._pending)))  # the oldest silent one goes first
        self._pending[sock] = (addr, time.monotonic())
        sel.register(sock, selectors.EVENT_READ)

    def _dispatch(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        addr, _ = self._pending.pop(sock)
        sel.unregister(sock)
        try:
            self._pool.submit(self._work, sock, addr)
        except RuntimeError:  # stopping: the pool takes no more work
            self._close(sock)

    def _expire(self, sel: selectors.BaseSelector, now: float) -> None:
        for sock, (_, since) in list(self._pending.items()):
            if now - since < self.idle_timeout:
                break  # oldest first: the rest are younger
            self._drop(sel, sock)

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        self._close(sock)

    # -- a worker ----------------------------------------------------------------------
    def _work(self, sock: socket.socket, addr: Any) -> None:
        try:
            self.finish_request(sock, addr)
        except CLIENT_GONE as exc:
            log.debug("http client %s went away: %s", addr, exc)
        except Exception:
            log.exception("http request from %s failed", addr)
        finally:
            self.shutdown_request(sock)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.close()

    def handle_error(self, request: Any, client_address: Any) -> None:  # socketserver's hook
        log.debug("http client %s: error while handling its request", client_address)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._serving:
            self._stopped.wait(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.server_close()


def pending_count(server: BoundedHTTPServer) -> int:
    """Connections accepted that have sent nothing yet (for tests and metrics)."""
    return len(server._pending)


__all__ = ["CLIENT_GONE", "BoundedHTTPServer", "pending_count"]
