"""The base of the sandbox's fake HTTP servers (Kubernetes API, ECS, dcgm-exporter): serve
from a background thread (tests, the in-process sandbox) or the calling thread (a command
line), stop within a bounded wait, use as a context manager."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Self


class ThreadedHttpServer:
    def __init__(self, httpd: ThreadingHTTPServer, name: str, poll_interval: float = 0.05):
        httpd.daemon_threads = True  # a hung client never blocks stop()
        self._httpd = httpd
        self._poll = poll_interval
        self._thread = threading.Thread(target=httpd.serve_forever, args=(poll_interval,),
                                        name=name, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve from the calling thread until interrupted (the command-line entry points)."""
        try:
            self._httpd.serve_forever(self._poll)
        finally:
            self._httpd.server_close()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that must be running
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
